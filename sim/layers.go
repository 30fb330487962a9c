package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxLayerFloats bounds one tensor of a layer file (2³⁴ floats, 64 GiB).
const maxLayerFloats = 1 << 34

// ReadLayers reads a model's tensor sizes for Config.Layers: one count of
// float32 values a line, in the order of the parameter vector; blank
// lines and lines starting with # are skipped. It returns their sizes in
// bytes. sim/models holds VGG-16, ResNet-101 and Inception V3 as
// torchvision lays them out (scripts/layer-sizes.py wrote them).
func ReadLayers(r io.Reader) ([]int64, error) {
	var layers []int64
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.TrimSpace(sc.Text())
		if f == "" || strings.HasPrefix(f, "#") {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 || n > maxLayerFloats {
			return nil, fmt.Errorf("line %d: %q: want a tensor's number of floats, 1..%d", line, f, int64(maxLayerFloats))
		}
		layers = append(layers, 4*n)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("no tensor sizes: want one count of floats a line")
	}
	return layers, nil
}
