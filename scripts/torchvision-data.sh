#!/usr/bin/env bash
# Lays out Fashion-MNIST as torchvision's datasets.FashionMNIST reads it,
# <dest>/FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte,
# from Shoal's copy of the idx files (Debian's dataset-fashion-mnist, gzipped
# or not), with no network: an unpacked source file is symlinked, a gzipped
# one is unpacked (torchvision 0.14 reads the raw files only). Then
# FashionMNIST(dest, download=True) finds them and downloads nothing.
#
#   scripts/torchvision-data.sh [src] [dest]   (default: $DATA_DIR, build/torchvision-data)
set -euo pipefail
src=${1:-${DATA_DIR:-/usr/share/datasets/fashion-mnist}}
dest=${2:-build/torchvision-data}
"$(dirname "$0")/ensure-dataset.sh" "$src"
raw=$dest/FashionMNIST/raw
mkdir -p "$raw"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
	if [ -s "$raw/$f" ]; then
		continue
	fi
	if [ -f "$src/$f" ]; then
		ln -sf "$(cd "$src" && pwd)/$f" "$raw/$f"
	elif [ -f "$src/$f.gz" ]; then
		gzip -dc "$src/$f.gz" >"$raw/$f.tmp" && mv "$raw/$f.tmp" "$raw/$f"
	else
		echo "torchvision-data: neither $src/$f nor $src/$f.gz exists" >&2
		exit 1
	fi
done
echo "$dest"
