package dpu

// SetSpinBeforeWait changes the idle rounds before the loop sleeps (tests).
func SetSpinBeforeWait(n int) (old int) { old, spinBeforeWait = spinBeforeWait, n; return old }
