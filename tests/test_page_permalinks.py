"""A page's permalink (the address's #fragment) is read without throwing: a malformed percent-escape (``#%``,
``#%ZZ``, a lone surrogate's escape) must not stop the page's pickers. The page's own hashId runs under node on
generated fragments; every decodeURIComponent in the templates is guarded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

TEMPLATES = Path(__file__).resolve().parents[1] / "harness" / "templates"


def _hash_id_source() -> str:
    text = (TEMPLATES / "base.html").read_text()
    m = re.search(r"function hashId\(hash\) \{.*?\n  \}", text, re.S)
    assert m, "base.html has no hashId"
    return m.group()


def test_every_decode_in_the_templates_is_guarded():
    for path in TEMPLATES.glob("*.html"):
        for line in path.read_text().splitlines():
            if "decodeURIComponent(" in line:
                assert "try" in line and "catch" in line, f"{path.name}: {line.strip()}"


_fragment = st.lists(st.one_of(st.sampled_from(["%", "%Z", "%ZZ", "%E0%A4%A", "%ED%A0%80", "%C3", "%25", "%41",
                                                "#", "%%", "%u0041"]),
                               st.text(max_size=3)), max_size=6).map("".join)


@hsettings(max_examples=40, deadline=None, database=None)
@given(st.lists(_fragment, min_size=1, max_size=40))
def test_hash_id_never_throws_on_a_generated_fragment(fragments):
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node here to run the page's script")
    script = _hash_id_source() + "\nconst hs = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n" \
        "process.stdout.write(JSON.stringify(hs.map(h => typeof hashId('#' + h))));"
    res = subprocess.run([node, "-e", script], input=json.dumps(fragments), capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr[-500:]
    assert json.loads(res.stdout) == ["string"] * len(fragments)


def test_hash_id_decodes_a_good_escape_and_keeps_a_bad_one():
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node here to run the page's script")
    script = _hash_id_source() + "\nprocess.stdout.write(JSON.stringify(['#a%20b', '#%', '#%ZZ', ''].map(hashId)));"
    res = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60)
    assert json.loads(res.stdout) == ["a b", "%", "%ZZ", ""]
