package dpu_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/openrdmo/rdmo/dpu"
)

func TestMain(m *testing.M) {
	if s := os.Getenv("DPU_SPIN"); s != "" {
		n, _ := strconv.Atoi(s)
		dpu.SetSpinBeforeWait(n)
	}
	os.Exit(m.Run())
}
