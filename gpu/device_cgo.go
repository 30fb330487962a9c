//go:build cgo

package gpu

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
)

// Count returns the number of CUDA devices, loading the libraries first.
func Count() (int, error) {
	l, err := loadOnce()
	if err != nil {
		return 0, err
	}
	return l.deviceCount()
}

// Libraries returns the paths of the loaded CUDA libraries, or the error
// of the search.
func Libraries() ([]string, error) {
	l, err := loadOnce()
	if err != nil {
		return nil, err
	}
	return []string{l.cudaPath, l.nvrtcPath, l.cublasPath}, nil
}

// Device is an nn.Device on one CUDA GPU. All its CUDA calls run on one
// goroutine locked to its OS thread (the executor), where the device's
// primary context is current and which owns the stream, the cuBLAS handle
// and the kernels; the methods queue work there. See nn.Device for the
// contract: one goroutine uses a Device at a time, and Sync reports
// errors.
type Device struct {
	l       *libs
	ordinal int
	name    string
	cc      [2]int

	work chan func()
	done chan struct{}

	// Owned by the executor.
	dev     int
	stream  unsafe.Pointer
	blas    unsafe.Pointer
	module  unsafe.Pointer
	fns     map[string]unsafe.Pointer
	err     error      // the first error since the last Sync, or a sticky one
	sticky  error      // a lost context: every later Sync returns it
	stage   [][]byte   // pinned staging buffers
	used    []int      // bytes used of each since the last Sync
	pending []download // device-to-host copies to finish at Sync

	// CUDA graphs (graph_cgo.go): the graph being captured, the graphs
	// launched since the last Sync, and cuBLAS's workspace.
	capture   *graph
	replayed  []*graph
	workspace uint64
}

// download is a queued copy into pinned memory, copied to dst at Sync.
type download struct{ dst, pinned []byte }

// cudaMem is a device allocation.
type cudaMem struct{ ptr uint64 }

var _ nn.Device = (*Device)(nil)

// NewDevice opens GPU ordinal: it retains the primary context, creates a
// stream and a cuBLAS handle, and compiles the kernels with NVRTC for the
// device's architecture (the CUBIN is cached on disk, see CacheDir).
func NewDevice(ordinal int) (*Device, error) {
	l, err := loadOnce()
	if err != nil {
		return nil, err
	}
	return openDevice(l, ordinal)
}

// openDevice is NewDevice with the libraries given (tests load their own).
func openDevice(l *libs, ordinal int) (*Device, error) {
	n, err := l.deviceCount()
	if err != nil {
		return nil, fmt.Errorf("gpu: counting devices: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("gpu: device %d: %w (%d CUDA devices, want 0 to %d)", ordinal, ErrNoGPU, n, n-1)
	}
	d := &Device{l: l, ordinal: ordinal, work: make(chan func(), 256), done: make(chan struct{})}
	started := make(chan error, 1)
	go d.run(started)
	if err := <-started; err != nil {
		<-d.done
		return nil, err
	}
	return d, nil
}

// run is the executor.
func (d *Device) run(started chan<- error) {
	defer close(d.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.setUp(); err != nil {
		d.tearDown()
		started <- fmt.Errorf("gpu: device %d: %w", d.ordinal, err)
		return
	}
	started <- nil
	for f := range d.work {
		f()
	}
	d.tearDown()
}

func (d *Device) setUp() error {
	dev, name, major, minor, _, err := d.l.deviceInfo(d.ordinal)
	if err != nil {
		return err
	}
	d.dev, d.name, d.cc = dev, name, [2]int{major, minor}
	if _, err := d.l.retainContext(dev); err != nil {
		return fmt.Errorf("primary context: %w", err)
	}
	if d.stream, err = d.l.streamCreate(); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if d.blas, err = d.l.blasCreate(d.stream); err != nil {
		return err
	}
	if err := d.setWorkspace(); err != nil {
		return err
	}
	cubin, err := d.kernels()
	if err != nil {
		return err
	}
	d.module, d.fns, err = d.l.loadModule(cubin, kernelNames)
	return err
}

// blasWorkspaceBytes is cuBLAS's workspace: 32 MiB, what NVIDIA's cuBLAS
// documentation advises for Hopper (4 MiB for earlier GPUs).
const blasWorkspaceBytes = 32 << 20

// setWorkspace gives cuBLAS a workspace of the device's own, where the
// library can take one: cuBLAS would otherwise allocate its own while a
// step is captured, and eager and captured steps then share one.
func (d *Device) setWorkspace() error {
	if d.l.cublasSetWorkspace == nil {
		return nil
	}
	p, err := d.l.memAlloc(blasWorkspaceBytes)
	if err != nil {
		return fmt.Errorf("cuBLAS workspace: %w", err)
	}
	d.workspace = p
	_, err = d.l.blasWorkspace(d.blas, p, blasWorkspaceBytes)
	return err
}

func (d *Device) tearDown() {
	for _, b := range d.stage {
		d.l.hostFree(b)
	}
	d.stage, d.used = nil, nil
	if d.module != nil {
		d.l.unloadModule(d.module)
	}
	if d.blas != nil {
		d.l.blasDestroy(d.blas)
	}
	if d.workspace != 0 {
		_ = d.l.memFree(d.workspace)
	}
	if d.stream != nil {
		d.l.streamDestroy(d.stream)
	}
	d.l.releaseContext(d.dev)
}

// CacheDir is where compiled kernels are kept: $SHOAL_CUDA_CACHE, else
// shoal/cuda under the user's cache directory; "" when there is none.
func CacheDir() string {
	if v := os.Getenv("SHOAL_CUDA_CACHE"); v != "" {
		return v
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "shoal", "cuda")
	}
	return ""
}

// kernels returns the CUBIN for this device: from the cache, keyed by the
// source, the options and the NVRTC and driver versions, or compiled.
func (d *Device) kernels() ([]byte, error) {
	opts := []string{fmt.Sprintf("--gpu-architecture=sm_%d%d", d.cc[0], d.cc[1])}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%q\x00nvrtc %s\x00driver %d", kernelSource, opts, d.l.nvrtcVersionString(), d.l.driverVersion())
	key := hex.EncodeToString(h.Sum(nil))[:32]
	dir := CacheDir()
	path := filepath.Join(dir, "kernels-"+key+".cubin")
	if dir != "" {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, nil
		}
	}
	cubin, err := d.l.compile(kernelSource, opts)
	if err != nil {
		return nil, fmt.Errorf("compiling the kernels with NVRTC %s for sm_%d%d: %w", d.l.nvrtcVersionString(), d.cc[0], d.cc[1], err)
	}
	if dir != "" && os.MkdirAll(dir, 0o755) == nil {
		// A cache that cannot be written costs a compile next time, nothing more.
		if f, err := os.CreateTemp(dir, ".kernels-*"); err == nil {
			_, werr := f.Write(cubin)
			if cerr := f.Close(); werr == nil && cerr == nil {
				_ = os.Rename(f.Name(), path)
			}
			_ = os.Remove(f.Name())
		}
	}
	return cubin, nil
}

// Name returns e.g. "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)".
func (d *Device) Name() string {
	return fmt.Sprintf("cuda:%d %s (sm_%d%d)", d.ordinal, d.name, d.cc[0], d.cc[1])
}

// Ordinal returns the device's CUDA ordinal.
func (d *Device) Ordinal() int { return d.ordinal }

// queue runs f on the executor unless an error is pending.
func (d *Device) queue(f func() error) {
	d.work <- func() {
		if d.err != nil {
			return
		}
		if err := f(); err != nil {
			d.fail(err)
		}
	}
}

// call runs f on the executor and waits for it.
func (d *Device) call(f func() error) error {
	res := make(chan error, 1)
	d.work <- func() { res <- f() }
	return <-res
}

// fail records err; a sticky CUDA error also ends the context's use.
func (d *Device) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	var ce *CUDAError
	if errors.As(err, &ce) && ce.Sticky() && d.sticky == nil {
		d.sticky = fmt.Errorf("%w (the CUDA context is lost: restart the worker)", err)
	}
}

func ptr(op string, m nn.Mem, n int) uint64 {
	if m.Nil() {
		return 0
	}
	m.Check(op, n)
	return address(op, m)
}

// ptr16 is ptr for n 2-byte elements (float16 or bfloat16).
func ptr16(op string, m nn.Mem, n int) uint64 {
	m.CheckHalves(op, n)
	return address(op, m)
}

// address is m's device address.
func address(op string, m nn.Mem) uint64 {
	h, off := m.Handle()
	cm, ok := h.(*cudaMem)
	if !ok {
		panic(fmt.Sprintf("gpu: %s: memory of another device (%T)", op, h))
	}
	return cm.ptr + uint64(off)
}

// Alloc allocates device memory.
func (d *Device) Alloc(bytes int) (nn.Mem, error) {
	if bytes < 0 {
		return nn.Mem{}, fmt.Errorf("gpu: Alloc(%d): want a size >= 0", bytes)
	}
	var p uint64
	err := d.call(func() error {
		var err error
		p, err = d.l.memAlloc(max(bytes, 4))
		return err
	})
	if err != nil {
		return nn.Mem{}, fmt.Errorf("gpu: %s: allocating %d bytes: %w", d.Name(), bytes, err)
	}
	return nn.NewMem(&cudaMem{ptr: p}, bytes), nil
}

// Free frees an allocation.
func (d *Device) Free(m nn.Mem) {
	p := ptr("Free", m, 0)
	d.work <- func() {
		if err := d.l.memFree(p); err != nil {
			d.fail(err)
		}
	}
}

// staging returns n bytes of pinned memory valid until the next Sync.
func (d *Device) staging(n int) ([]byte, error) {
	for i, b := range d.stage {
		if len(b)-d.used[i] >= n {
			s := b[d.used[i] : d.used[i]+n]
			d.used[i] += (n + 63) &^ 63
			d.used[i] = min(d.used[i], len(b))
			return s, nil
		}
	}
	size := max(n, 4<<20)
	if k := len(d.stage); k > 0 {
		size = max(size, 2*len(d.stage[k-1]))
	}
	b, err := d.l.hostAlloc(size)
	if err != nil {
		return nil, fmt.Errorf("pinned host memory of %d bytes: %w", size, err)
	}
	d.stage = append(d.stage, b)
	d.used = append(d.used, 0)
	return d.staging(n)
}

// Upload copies src into pinned memory on the executor and queues the
// copy to the device.
func (d *Device) Upload(dst nn.Mem, src []byte) {
	if len(src) > dst.Bytes() {
		panic(fmt.Sprintf("gpu: Upload: %d bytes into %d", len(src), dst.Bytes()))
	}
	if len(src) == 0 {
		return
	}
	p := ptr("Upload", dst, 0)
	d.queue(func() error {
		var s []byte
		var err error
		if d.capture != nil {
			s, err = d.capture.pinned(d.l, len(src), &d.capture.ups)
		} else {
			s, err = d.staging(len(src))
		}
		if err != nil {
			return err
		}
		copy(s, src)
		return d.l.htod(p, s, d.stream)
	})
}

// Download queues the copy to pinned memory; Sync copies it into dst.
func (d *Device) Download(dst []byte, src nn.Mem) {
	if len(dst) > src.Bytes() {
		panic(fmt.Sprintf("gpu: Download: %d bytes from %d", len(dst), src.Bytes()))
	}
	if len(dst) == 0 {
		return
	}
	p := ptr("Download", src, 0)
	d.queue(func() error {
		if d.capture != nil { // Replay says where the copy goes
			s, err := d.capture.pinned(d.l, len(dst), &d.capture.downs)
			if err != nil {
				return err
			}
			return d.l.dtoh(s, p, d.stream)
		}
		s, err := d.staging(len(dst))
		if err != nil {
			return err
		}
		d.pending = append(d.pending, download{dst, s})
		return d.l.dtoh(s, p, d.stream)
	})
}

// Zero clears n elements.
func (d *Device) Zero(m nn.Mem, n int) {
	if n == 0 {
		return
	}
	p := ptr("Zero", m, n)
	d.queue(func() error { return d.l.memsetD32(p, 0, n, d.stream) })
}

// Sync waits for the stream, finishes the downloads and returns the first
// error since the last Sync (or the sticky one).
func (d *Device) Sync() error {
	return d.call(func() error {
		err := d.err
		if err == nil {
			err = d.l.streamSync(d.stream)
			if err != nil {
				d.fail(err)
			}
		}
		if err == nil {
			for _, p := range d.pending {
				copy(p.dst, p.pinned)
			}
		}
		d.pending = d.pending[:0]
		for _, g := range d.replayed {
			g.launched = false
		}
		d.replayed = d.replayed[:0]
		clear(d.used)
		if d.sticky != nil {
			d.err = d.sticky
			return d.sticky
		}
		d.err = nil
		return err
	})
}

// Close stops the executor and releases the context; memory from Alloc
// must have been freed.
func (d *Device) Close() error {
	if d.work == nil {
		return nil
	}
	err := d.Sync()
	close(d.work)
	<-d.done
	d.work = nil
	return err
}

// gemmNeed is how many elements a row-major operand of r×c (op applied)
// with leading dimension ld spans.
func gemmNeed(trans bool, r, c, ld int) int {
	if r == 0 || c == 0 {
		return 0
	}
	if trans {
		r, c = c, r
	}
	return (r-1)*ld + c
}

// Gemm runs row-major C = alpha·op(A)·op(B) + beta·C as the column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ in cuBLAS.
func (d *Device) Gemm(tA, tB bool, m, n, k int, alpha float32, a nn.Mem, lda int, b nn.Mem, ldb int, beta float32, c nn.Mem, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gpu: Gemm: negative dimension %d×%d×%d", m, n, k))
	}
	pa, pb, pc := ptr("Gemm A", a, gemmNeed(tA, m, k, lda)), ptr("Gemm B", b, gemmNeed(tB, k, n, ldb)), ptr("Gemm C", c, gemmNeed(false, m, n, ldc))
	if m == 0 || n == 0 {
		return
	}
	d.queue(func() error { return d.l.sgemm(d.blas, tB, tA, n, m, k, alpha, pb, ldb, pa, lda, beta, pc, ldc) })
}

// GemmHalf is Gemm through cublasGemmEx, a and b in half precision and c
// in float32 (see nn.Device).
func (d *Device) GemmHalf(tA, tB bool, m, n, k int, alpha float32, a nn.Mem, lda int, b nn.Mem, ldb int, beta float32, c nn.Mem, ldc int, bf16 bool) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gpu: GemmHalf: negative dimension %d×%d×%d", m, n, k))
	}
	pa, pb, pc := ptr16("GemmHalf A", a, gemmNeed(tA, m, k, lda)), ptr16("GemmHalf B", b, gemmNeed(tB, k, n, ldb)), ptr("GemmHalf C", c, gemmNeed(false, m, n, ldc))
	if m == 0 || n == 0 {
		return
	}
	d.queue(func() error {
		return d.l.gemmHalf(d.blas, tB, tA, n, m, k, alpha, pb, ldb, pa, lda, beta, pc, ldc, bf16)
	})
}

// The kernels' launch shapes: 256 threads a block, at most 65,535 blocks
// (the kernels loop over the rest).
const (
	blockThreads = 256
	// colSumThreads is shoal_col_sum's block: 32 columns × 32 row slices.
	colSumThreads = 1024
	maxBlocks     = 65535
)

// args packs kernel arguments with their natural alignment.
type args struct {
	b    []byte
	offs []int32
}

func (a *args) ptr(p uint64) *args {
	for len(a.b)%8 != 0 {
		a.b = append(a.b, 0)
	}
	a.offs = append(a.offs, int32(len(a.b)))
	a.b = binary.LittleEndian.AppendUint64(a.b, p)
	return a
}

func (a *args) i(v int) *args {
	if v > math.MaxInt32 || v < math.MinInt32 {
		panic(fmt.Sprintf("gpu: kernel argument %d does not fit an int", v))
	}
	a.offs = append(a.offs, int32(len(a.b)))
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(int32(v)))
	return a
}

func (a *args) f(v float32) *args {
	a.offs = append(a.offs, int32(len(a.b)))
	a.b = binary.LittleEndian.AppendUint32(a.b, math.Float32bits(v))
	return a
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// launch queues kernel name over threads threads (grid-stride beyond).
func (d *Device) launch(name string, threads, block int, a *args) {
	if threads <= 0 {
		return
	}
	grid := min((threads+block-1)/block, maxBlocks)
	d.queue(func() error {
		f, ok := d.fns[name]
		if !ok {
			return fmt.Errorf("gpu: no kernel %s", name)
		}
		if err := d.l.launch(f, grid, block, d.stream, a.b, a.offs); err != nil {
			return fmt.Errorf("launching %s: %w", name, err)
		}
		return nil
	})
}

// BiasAct: see nn.Device.
func (d *Device) BiasAct(y, b nn.Mem, n, ch, hw int, relu bool) {
	a := new(args).ptr(ptr("BiasAct", y, n*ch*hw)).ptr(ptr("BiasAct", b, ch)).i(n).i(ch)
	if hw == 1 { // a dense layer's: nn's dense path
		d.launch(kBiasAct, n*ch, blockThreads, a.i(boolInt(relu)))
		return
	}
	d.launch(kChannelBiasAct, n*ch*hw, blockThreads, a.i(hw).i(boolInt(relu)))
}

// BiasGrad: see nn.Device.
func (d *Device) BiasGrad(db, dy, y nn.Mem, n, ch, hw int) {
	a := new(args).ptr(ptr("BiasGrad", db, ch)).ptr(ptr("BiasGrad", dy, n*ch*hw)).ptr(ptr("BiasGrad", y, n*ch*hw)).i(n).i(ch)
	if hw == 1 { // 32 columns a block, 32 row slices
		d.launch(kColSum, (ch+31)/32*colSumThreads, colSumThreads, a)
		return
	}
	// One block per channel.
	d.launch(kChannelSum, ch*blockThreads, blockThreads, a.i(hw))
}

// ReLUBackward: see nn.Device.
func (d *Device) ReLUBackward(dy, y nn.Mem, n int) {
	d.launch(kReLUBackward, n, blockThreads, new(args).ptr(ptr("ReLUBackward", dy, n)).ptr(ptr("ReLUBackward", y, n)).i(n))
}

// SoftmaxXent: see nn.Device. One block of 128 threads per row.
func (d *Device) SoftmaxXent(z, labels, dz, loss, correct nn.Mem, rows, classes int, scale float32) {
	a := new(args).ptr(ptr("SoftmaxXent", z, rows*classes)).ptr(ptr("SoftmaxXent", labels, rows)).
		ptr(ptr("SoftmaxXent", dz, rows*classes)).ptr(ptr("SoftmaxXent", loss, rows)).ptr(ptr("SoftmaxXent", correct, rows)).
		i(rows).i(classes).f(scale)
	d.launch(kSoftmaxXent, rows*128, 128, a)
}

// SGDMomentum: see nn.Device.
func (d *Device) SGDMomentum(p, buf, g nn.Mem, n int, lr, mu, wd float32, nesterov bool) {
	a := new(args).ptr(ptr("SGDMomentum", p, n)).ptr(ptr("SGDMomentum", buf, n)).ptr(ptr("SGDMomentum", g, n)).
		i(n).f(lr).f(mu).f(wd).i(boolInt(nesterov))
	d.launch(kSGDMomentum, n, blockThreads, a)
}

// Adam: see nn.Device.
func (d *Device) Adam(p, m, v, g nn.Mem, n int, k optim.AdamStep) {
	a := new(args).ptr(ptr("Adam", p, n)).ptr(ptr("Adam", m, n)).ptr(ptr("Adam", v, n)).ptr(ptr("Adam", g, n)).i(n).
		f(k.StepSize).f(k.BC2Sqrt).f(k.Weight).f(k.Beta2).f(k.OneMinusBeta2).f(k.Eps).f(k.WD).f(k.Decay)
	d.launch(kAdam, n, blockThreads, a)
}

// Im2Col: see nn.Device.
func (d *Device) Im2Col(x, col nn.Mem, n, c, h, w, kh, kw, pad, oh, ow int) {
	size := c * kh * kw * n * oh * ow
	a := new(args).ptr(ptr("Im2Col", x, n*c*h*w)).ptr(ptr("Im2Col", col, size)).i(n).i(c).i(h).i(w).i(kh).i(kw).i(pad).i(oh).i(ow)
	d.launch(kIm2col, size, blockThreads, a)
}

// Col2Im: see nn.Device.
func (d *Device) Col2Im(col, dx nn.Mem, n, c, h, w, kh, kw, pad, oh, ow int) {
	a := new(args).ptr(ptr("Col2Im", col, c*kh*kw*n*oh*ow)).ptr(ptr("Col2Im", dx, n*c*h*w)).i(n).i(c).i(h).i(w).i(kh).i(kw).i(pad).i(oh).i(ow)
	d.launch(kCol2im, n*c*h*w, blockThreads, a)
}

// SwapAxes: see nn.Device.
func (d *Device) SwapAxes(dst, src nn.Mem, a, b, c int) {
	p := new(args).ptr(ptr("SwapAxes", dst, a*b*c)).ptr(ptr("SwapAxes", src, a*b*c)).i(a).i(b).i(c)
	d.launch(kSwapAxes, a*b*c, blockThreads, p)
}

// MaxPoolForward: see nn.Device.
func (d *Device) MaxPoolForward(x, y, arg nn.Mem, n, c, h, w, k int) {
	o := n * c * (h / k) * (w / k)
	a := new(args).ptr(ptr("MaxPoolForward", x, n*c*h*w)).ptr(ptr("MaxPoolForward", y, o)).ptr(ptr("MaxPoolForward", arg, o)).i(n).i(c).i(h).i(w).i(k)
	d.launch(kMaxPoolForward, o, blockThreads, a)
}

// MaxPoolBackward: see nn.Device.
func (d *Device) MaxPoolBackward(dy, arg, dx nn.Mem, n, c, h, w, k int) {
	o := n * c * (h / k) * (w / k)
	a := new(args).ptr(ptr("MaxPoolBackward", dy, o)).ptr(ptr("MaxPoolBackward", arg, o)).ptr(ptr("MaxPoolBackward", dx, n*c*h*w)).i(n).i(c).i(h).i(w).i(k)
	d.launch(kMaxPoolBackward, n*c*h*w, blockThreads, a)
}

// ToHalf: see nn.Device.
func (d *Device) ToHalf(dst, src nn.Mem, n int, bf16 bool) {
	name := kF32ToF16
	if bf16 {
		name = kF32ToBF16
	}
	d.launch(name, n, blockThreads, new(args).ptr(ptr("ToHalf", src, n)).ptr(ptr16("ToHalf", dst, n)).i(n))
}

// FromHalf: see nn.Device.
func (d *Device) FromHalf(dst, src nn.Mem, n int, bf16 bool) {
	name := kF16ToF32
	if bf16 {
		name = kBF16ToF32
	}
	d.launch(name, n, blockThreads, new(args).ptr(ptr16("FromHalf", src, n)).ptr(ptr("FromHalf", dst, n)).i(n))
}

// Unscale: see nn.Device.
func (d *Device) Unscale(g nn.Mem, n int, s float32, found nn.Mem) {
	d.launch(kUnscale, n, blockThreads, new(args).ptr(ptr("Unscale", g, n)).i(n).f(s).ptr(ptr("Unscale", found, 1)))
}
