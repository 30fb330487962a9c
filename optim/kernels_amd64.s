//go:build !purego

#include "textflag.h"

// func momentumAVX2(d, p, grad, buf *float32, n int, lr, mu float32)
// For i < n (a multiple of 16): b = mu·buf[i] + grad[i]; buf[i] = b;
// d[i] = p[i] - lr·b; each operation rounded to float32, as the Go loop.
TEXT ·momentumAVX2(SB), NOSPLIT, $0-48
	MOVQ         d+0(FP), DI
	MOVQ         p+8(FP), SI
	MOVQ         grad+16(FP), DX
	MOVQ         buf+24(FP), BX
	MOVQ         n+32(FP), CX
	VBROADCASTSS lr+40(FP), Y14
	VBROADCASTSS mu+44(FP), Y15
	SHLQ         $2, CX
	XORQ         AX, AX

momentumLoop:
	CMPQ    AX, CX
	JGE     momentumDone
	VMOVUPS (BX)(AX*1), Y0
	VMOVUPS 32(BX)(AX*1), Y1
	VMULPS  Y15, Y0, Y0
	VMULPS  Y15, Y1, Y1
	VADDPS  (DX)(AX*1), Y0, Y0
	VADDPS  32(DX)(AX*1), Y1, Y1
	VMOVUPS Y0, (BX)(AX*1)
	VMOVUPS Y1, 32(BX)(AX*1)
	VMULPS  Y14, Y0, Y0
	VMULPS  Y14, Y1, Y1
	VMOVUPS (SI)(AX*1), Y2
	VMOVUPS 32(SI)(AX*1), Y3
	VSUBPS  Y0, Y2, Y2
	VSUBPS  Y1, Y3, Y3
	VMOVUPS Y2, (DI)(AX*1)
	VMOVUPS Y3, 32(DI)(AX*1)
	ADDQ    $64, AX
	JMP     momentumLoop

momentumDone:
	VZEROUPPER
	RET

// func sgdAVX2(d, p, grad *float32, n int, lr float32)
// For i < n (a multiple of 16): d[i] = p[i] - lr·grad[i], rounded as the Go loop.
TEXT ·sgdAVX2(SB), NOSPLIT, $0-36
	MOVQ         d+0(FP), DI
	MOVQ         p+8(FP), SI
	MOVQ         grad+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS lr+32(FP), Y14
	SHLQ         $2, CX
	XORQ         AX, AX

sgdLoop:
	CMPQ    AX, CX
	JGE     sgdDone
	VMULPS  (DX)(AX*1), Y14, Y0
	VMULPS  32(DX)(AX*1), Y14, Y1
	VMOVUPS (SI)(AX*1), Y2
	VMOVUPS 32(SI)(AX*1), Y3
	VSUBPS  Y0, Y2, Y2
	VSUBPS  Y1, Y3, Y3
	VMOVUPS Y2, (DI)(AX*1)
	VMOVUPS Y3, 32(DI)(AX*1)
	ADDQ    $64, AX
	JMP     sgdLoop

sgdDone:
	VZEROUPPER
	RET
