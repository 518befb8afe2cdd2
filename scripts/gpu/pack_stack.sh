#!/usr/bin/env bash
# Packs a stack overlay (wheels unpacked as `pip --target` would, minus the libraries a convolution never loads)
# into xz parts small enough to travel to the lent GPU machine beside the working tree.
#
#   scripts/gpu/pack_stack.sh NAME WHEEL_DIR [DROP_GLOB...]
#   e.g. scripts/gpu/pack_stack.sh cudnn927 /work/dl/cudnn927 'nvidia/cudnn/lib/libcudnn_adv.so*' 'nvidia/*/include'
#
# Why not the wheels themselves: zip deflates each library with a 32 KiB window, and CUDA fatbins repeat across
# megabytes; xz's 64 MiB window packed 60 MB of cuDNN 9.27's precompiled engines into 6.6 MB where deflate needed
# 17 MB (docs/history.md). Transfers are paid in device time, so fewer parts are cheaper runs.
# On the device: `bash .devwheels/NAME/unpack.sh` (after every part is copied to /tmp/dw-NAME) gives /tmp/stack-NAME.
set -euo pipefail
name=${1:?usage: pack_stack.sh NAME WHEEL_DIR [DROP_GLOB...]}; wheels=${2:?wheel dir}; shift 2
[[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "pack_stack: NAME may hold letters, digits, '.', '_', '-' only" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
out=$root/.devwheels/$name
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for w in "$wheels"/*.whl; do unzip -q -o "$w" -d "$stage/tree"; done
for g in "$@"; do (cd "$stage/tree" && rm -rf $g); done
(cd "$stage/tree" && find . -type f | sort > "$stage/files" && du -sh . | cut -f1 > "$stage/size")
tree_kib=$(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -k -c 2>/dev/null | tail -1 | cut -f1)
chunk_mib=$(( 64 - 4 - (tree_kib + 1023) / 1024 ))
rm -rf "$out" && mkdir -p "$out"
tar -C "$stage/tree" -cf - . | xz -6 -T2 -M 4GiB --lzma2=preset=6,dict=64MiB -c > "$stage/stack.tar.xz"
(cd "$out" && split -b "${chunk_mib}M" -d -a 3 "$stage/stack.tar.xz" part. && sha256sum "$stage/stack.tar.xz" | cut -d' ' -f1 > sha256)
cp "$stage/files" "$out/files"
n=$(ls "$out"/part.* | wc -l)
cat > "$out/unpack.sh" <<EOS
#!/usr/bin/env bash
# On the device: join the $n parts in /tmp/dw-$name, check them, unpack into /tmp/stack-$name.
set -euo pipefail
here=\$(cd "\$(dirname "\$0")" && pwd)
cd /tmp/dw-$name
[ "\$(ls part.* | wc -l)" -eq $n ] || { echo "unpack: \$(ls part.* | wc -l) of $n parts in /tmp/dw-$name (machine restarted? copy them again)" >&2; exit 3; }
cat part.* > stack.tar.xz
[ "\$(sha256sum stack.tar.xz | cut -d' ' -f1)" = "\$(cat "\$here/sha256")" ] || { echo "unpack: sha256 mismatch" >&2; exit 3; }
mkdir -p /tmp/stack-$name
if command -v xz >/dev/null; then xz -dc stack.tar.xz | tar -xf - -C /tmp/stack-$name
else python3 -c "import tarfile,sys; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2], filter='data')" stack.tar.xz /tmp/stack-$name; fi
rm -f stack.tar.xz part.*
echo "stack $name unpacked in /tmp/stack-$name (\$(du -sh /tmp/stack-$name | cut -f1))"
EOS
chmod +x "$out/unpack.sh"
echo "stack '$name': $(cat "$stage/size") unpacked, $(du -ch "$out"/part.* | tail -1 | cut -f1) in $n part(s) of up to ${chunk_mib} MiB"
for p in "$out"/part.*; do
  echo "  carry [\".devwheels/$name/$(basename "$p")\"]  command: mkdir -p /tmp/dw-$name && cp .devwheels/$name/$(basename "$p") /tmp/dw-$name/"
done
