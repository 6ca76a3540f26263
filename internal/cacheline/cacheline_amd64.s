#include "textflag.h"

// func cpuid(leaf, sub uint32) (eax, ebx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-16
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	RET

// func evict(p unsafe.Pointer, n int)
TEXT ·evict(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX  // CX: the end
	ANDQ $-64, AX // AX: the first line
loop:
	CMPQ AX, CX
	JAE done
	CLFLUSHOPT (AX)
	ADDQ $64, AX
	JMP loop
done:
	// CLFLUSHOPT is ordered only by fences: make the evictions complete
	// before the caller tells anyone the buffer is free.
	SFENCE
	RET
