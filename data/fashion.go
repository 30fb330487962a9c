package data

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultFashionMNISTDir is where the dataset-fashion-mnist package
// installs the four files.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// The files of Fashion-MNIST. Each may also be gzipped, with ".gz" appended.
const (
	FashionMNISTTrainImages = "train-images-idx3-ubyte"
	FashionMNISTTrainLabels = "train-labels-idx1-ubyte"
	FashionMNISTTestImages  = "t10k-images-idx3-ubyte"
	FashionMNISTTestLabels  = "t10k-labels-idx1-ubyte"
)

// FashionMNISTLabel names Fashion-MNIST's label l ("Ankle boot" for 9), or
// returns "" outside [0, 10).
func FashionMNISTLabel(l int) string {
	names := [fashionClasses]string{
		"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
		"Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
	}
	if l < 0 || l >= len(names) {
		return ""
	}
	return names[l]
}

const (
	fashionSide    = 28
	fashionClasses = 10
	fashionHint    = "; install it with `apt-get install dataset-fashion-mnist`, or train on generated data with `--dataset synthetic`"
)

// FashionMNISTConfig configures LoadFashionMNISTConfig.
type FashionMNISTConfig struct {
	// Dir holds the four idx files, each plain or gzipped.
	Dir string
	// Norm says how pixels become float32 on Gather.
	Norm Normalization
}

// DefaultFashionMNISTConfig reads DefaultFashionMNISTDir with
// NormalizeStandard.
func DefaultFashionMNISTConfig() FashionMNISTConfig {
	return FashionMNISTConfig{Dir: DefaultFashionMNISTDir, Norm: NormalizeStandard}
}

// LoadFashionMNIST loads the training (60,000) and test (10,000) sets from
// dir with the default normalization, NormalizeStandard.
func LoadFashionMNIST(dir string) (train, test Dataset, err error) {
	cfg := DefaultFashionMNISTConfig()
	cfg.Dir = dir
	return LoadFashionMNISTConfig(cfg)
}

// LoadFashionMNISTConfig loads Fashion-MNIST as cfg says. For each of the
// four files it reads the plain file if present, else the one with ".gz"
// appended. It checks the magic numbers, the 28×28 image size, that the
// images and labels files hold the same number of samples, that every file
// is exactly as long as its header promises and that every label is in
// [0, 10); each error names the file and what was expected. When the
// directory or a file is missing the error wraps fs.ErrNotExist.
//
// Pixels stay uint8 in memory (47 MB for the training set) and become
// float32 on Gather.
func LoadFashionMNISTConfig(cfg FashionMNISTConfig) (train, test Dataset, err error) {
	lut, err := cfg.Norm.table()
	if err != nil {
		return nil, nil, fmt.Errorf("fashion-mnist: %w", err)
	}
	if cfg.Dir == "" {
		return nil, nil, errors.New("fashion-mnist: empty directory: want the folder holding " + FashionMNISTTrainImages + " and the three other files")
	}
	if info, err := os.Stat(cfg.Dir); err != nil {
		return nil, nil, fmt.Errorf("fashion-mnist: dataset directory: %w%s", err, fashionHint)
	} else if !info.IsDir() {
		return nil, nil, fmt.Errorf("fashion-mnist: %s is not a directory%s", cfg.Dir, fashionHint)
	}
	trainDS, err := loadFashionSet(cfg.Dir, "fashion-mnist/train", FashionMNISTTrainImages, FashionMNISTTrainLabels, lut)
	if err != nil {
		return nil, nil, err
	}
	testDS, err := loadFashionSet(cfg.Dir, "fashion-mnist/test", FashionMNISTTestImages, FashionMNISTTestLabels, lut)
	if err != nil {
		return nil, nil, err
	}
	return trainDS, testDS, nil
}

func loadFashionSet(dir, name, imagesBase, labelsBase string, lut *[256]float32) (*memDataset, error) {
	imagesPath, err := findIDX(dir, imagesBase)
	if err != nil {
		return nil, err
	}
	labelsPath, err := findIDX(dir, labelsBase)
	if err != nil {
		return nil, err
	}
	images, err := readIDXFile(imagesPath, IDXImagesMagic, func(dims []int) error {
		if dims[1] != fashionSide || dims[2] != fashionSide { // the magic says 3 dimensions
			return fmt.Errorf("images are %d×%d, want %d×%d: %w", dims[1], dims[2], fashionSide, fashionSide, ErrFormat)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	labels, err := readIDXFile(labelsPath, IDXLabelsMagic, nil)
	if err != nil {
		return nil, err
	}
	n := images.Dims[0]
	if labels.Dims[0] != n {
		return nil, fmt.Errorf("%s holds %d images but %s holds %d labels, want as many labels as images: %w",
			imagesPath, n, labelsPath, labels.Dims[0], ErrFormat)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no images, want at least one: %w", imagesPath, ErrFormat)
	}
	y := make([]int32, n)
	for i, l := range labels.Data {
		if l >= fashionClasses {
			return nil, fmt.Errorf("%s: label %d at index %d, want [0, %d): %w", labelsPath, l, i, fashionClasses, ErrFormat)
		}
		y[i] = int32(l)
	}
	ds := &memDataset{
		name: name, n: n, c: 1, h: fashionSide, w: fashionSide, size: fashionSide * fashionSide,
		classes: fashionClasses, pix: images.Data, lut: lut, labels: y,
	}
	return ds, ds.check()
}

// findIDX returns dir/base if it exists, else dir/base.gz.
func findIDX(dir, base string) (string, error) {
	for _, p := range []string{filepath.Join(dir, base), filepath.Join(dir, base+".gz")} {
		info, err := os.Stat(p)
		if err == nil && info.Mode().IsRegular() {
			return p, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("fashion-mnist: %w", err)
		}
	}
	return "", fmt.Errorf("fashion-mnist: neither %s nor %s.gz in %s: %w%s", base, base, dir, fs.ErrNotExist, fashionHint)
}

// readIDXFile reads one idx file, gunzipping it when its name ends in ".gz".
// Errors name the path.
func readIDXFile(path string, magic uint32, dimsOK func(dims []int) error) (idx *IDX, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fashion-mnist: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			idx, err = nil, fmt.Errorf("%s: %w", path, cerr)
		}
	}()
	br := bufio.NewReaderSize(f, 256<<10)
	if !strings.HasSuffix(path, ".gz") {
		if idx, err = readIDX(br, magic, dimsOK); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return idx, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("%s: want a gzip stream: %w", path, err)
	}
	if idx, err = readIDX(zr, magic, dimsOK); err != nil {
		return nil, fmt.Errorf("%s (gunzipped): %w", path, err)
	}
	return idx, nil
}
