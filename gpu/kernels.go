package gpu

import _ "embed"

// kernelSource is the CUDA C of every kernel, compiled by NVRTC at run time
// for the device (see kernels.cu for the launch conventions).
//
//go:embed kernels.cu
var kernelSource string

// KernelSource returns the CUDA C of the kernels (kernels.cu), for tools
// that compile it elsewhere, such as the tests' CUDA emulator.
func KernelSource() string { return kernelSource }

// The kernels of kernels.cu, by their extern "C" names.
const (
	kBiasAct         = "shoal_bias_act"
	kReLUBackward    = "shoal_relu_backward"
	kColSum          = "shoal_col_sum"
	kSoftmaxXent     = "shoal_softmax_xent"
	kSGDMomentum     = "shoal_sgd_momentum"
	kAdam            = "shoal_adam"
	kUnscale         = "shoal_unscale"
	kIm2col          = "shoal_im2col"
	kCol2im          = "shoal_col2im"
	kSwapAxes        = "shoal_swap_axes"
	kChannelBiasAct  = "shoal_channel_bias_act"
	kChannelSum      = "shoal_channel_sum"
	kMaxPoolForward  = "shoal_maxpool_forward"
	kMaxPoolBackward = "shoal_maxpool_backward"
	kF32ToF16        = "shoal_f32_to_f16"
	kF16ToF32        = "shoal_f16_to_f32"
	kF32ToBF16       = "shoal_f32_to_bf16"
	kBF16ToF32       = "shoal_bf16_to_f32"
)

// kernelNames lists every kernel of kernels.cu; the module loader looks
// each one up.
var kernelNames = []string{
	kBiasAct,
	kReLUBackward,
	kColSum,
	kSoftmaxXent,
	kSGDMomentum,
	kAdam,
	kUnscale,
	kIm2col,
	kCol2im,
	kSwapAxes,
	kChannelBiasAct,
	kChannelSum,
	kMaxPoolForward,
	kMaxPoolBackward,
	kF32ToF16,
	kF16ToF32,
	kF32ToBF16,
	kBF16ToF32,
}
