#!/usr/bin/env bash
# Installs Debian's dataset-fashion-mnist when its files are missing.
set -euo pipefail
dir=${1:-/usr/share/datasets/fashion-mnist}
if ls "$dir"/train-images-idx3-ubyte* >/dev/null 2>&1; then
	exit 0
fi
echo "Fashion-MNIST not found in $dir: installing Debian's package dataset-fashion-mnist"
if ! command -v apt-get >/dev/null; then
	echo "apt-get is not available on this machine. Put the four Fashion-MNIST idx files" >&2
	echo "(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz," >&2
	echo "t10k-labels-idx1-ubyte.gz) in a folder and run: make run DATA_DIR=that/folder" >&2
	echo "or train on generated data: bin/shoal train --dataset synthetic" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "not root and no sudo: run 'apt-get install dataset-fashion-mnist' as root" >&2; exit 1; }
	sudo=sudo
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq dataset-fashion-mnist
