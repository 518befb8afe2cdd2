"""Fleet manifests from the image matrix: which rows each GPU node pool runs, shared by slurm.py and k8s.py.

A pool runs every row whose ``sm`` list holds the pool's architecture, so the same matrix that decides what
an image can run decides where the scheduler sends it. The templates live in docker/fleet/.
"""

from __future__ import annotations

from .imagematrix import DOCKER_DIR, Matrix, MatrixError, Row

FLEET_DIR = DOCKER_DIR / "fleet"


def templates():
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(FLEET_DIR)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def pool_rows(matrix: Matrix, rows: list[Row], cpu_named: bool = False) -> dict[str, list[Row]]:
    """pool name -> the given rows that can run on its architecture; a pool no row fits is an error. A CPU row
    needs no GPU: it runs on every pool when it was named (``cpu_named``), as `convbench run --rows` runs it on a
    GPU host only when named."""
    if not matrix.pools:
        raise MatrixError(f"{matrix.path}: no [[pool]] tables; fleet manifests need the GPU node pools")
    out = {}
    for pool in matrix.pools.values():
        fits = [r for r in rows if r.runs_on(pool.sm) or (cpu_named and not r.gpu)]
        if fits:
            out[pool.name] = fits
    if not out:
        raise MatrixError("none of the rows can run on any pool's architecture")
    return out
