#!/bin/sh
# Builds Shoal's container image FROM scratch, with no registry: the shoal
# binary (cgo, so that it can dlopen OpenBLAS), the shared libraries it and
# OpenBLAS need (found with ldd, copied to the paths the dynamic loader
# looks in), and the Fashion-MNIST idx files, so that the image trains with
# nothing mounted. It runs as nobody (65534).
#
#   scripts/image.sh [TAG]          default shoal:latest
#   SHOAL_IMAGE_GEMM=gonum scripts/image.sh shoal:gonum
#                                   a static CGO_ENABLED=0 build (gonum's GEMM)
set -eu
tag=${1:-shoal:latest}
gemm=${SHOAL_IMAGE_GEMM:-openblas}
data=${SHOAL_IMAGE_DATA:-/usr/share/datasets/fashion-mnist}
ctx=build/image
rm -rf "$ctx"
mkdir -p "$ctx/rootfs/bin" "$ctx/rootfs$data" "$ctx/ckpt"

for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
	if [ ! -f "$data/$f" ]; then
		echo "image: $data/$f is missing (apt-get install dataset-fashion-mnist, or set SHOAL_IMAGE_DATA)" >&2
		exit 1
	fi
	cp "$data/$f" "$ctx/rootfs$data/"
done

# copy_libs FILE: every library ldd resolves for FILE, at its own path.
copy_libs() {
	ldd "$1" | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | while read -r lib; do
		mkdir -p "$ctx/rootfs$(dirname "$lib")"
		cp -L "$lib" "$ctx/rootfs$lib"
	done
}

blas=""
if [ "$gemm" = gonum ]; then
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/rootfs/bin/shoal" ./cmd/shoal
else
	CGO_ENABLED=1 go build -trimpath -ldflags='-s -w' -o "$ctx/rootfs/bin/shoal" ./cmd/shoal
	copy_libs "$ctx/rootfs/bin/shoal"
	blas=$(/sbin/ldconfig -p | awk '$1 == "libopenblas.so.0" && /x86-64|x86_64|64bit/ {print $NF; exit}')
	if [ -z "$blas" ]; then
		echo "image: libopenblas.so.0 not found (apt-get install libopenblas0-pthread), or build with SHOAL_IMAGE_GEMM=gonum" >&2
		exit 1
	fi
	real=$(readlink -f "$blas")
	mkdir -p "$ctx/rootfs$(dirname "$blas")"
	cp -L "$real" "$ctx/rootfs$blas"
	copy_libs "$real"
fi
touch "$ctx/ckpt/.keep"

cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
# The checkpoint folder, which a named volume mounts over, belongs to nobody.
COPY --chown=65534:65534 ckpt/ /var/lib/shoal/
ENV SHOAL_OPENBLAS=$blas
USER 65534:65534
ENTRYPOINT ["/bin/shoal"]
CMD ["help"]
DOCKERFILE
if [ "$gemm" = gonum ]; then sed -i '/SHOAL_OPENBLAS/d' "$ctx/Dockerfile"; fi
docker build -q -t "$tag" "$ctx" >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$tag")
echo "image: $tag ($gemm GEMM), $((size / 1000000)) MB"
