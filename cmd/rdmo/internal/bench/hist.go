package bench

import (
	"math/bits"
	"sort"
	"time"
)

// Hist is a latency histogram in nanoseconds with log-linear buckets: 16
// buckets per power of two (relative error under 6.25%), exact below 32 ns;
// a quantile is interpolated within its bucket.
// It merges across rounds and processes; its JSON form is sparse.
type Hist struct {
	Counts map[int]uint64 `json:"counts,omitempty"` // bucket index -> samples
	N      uint64         `json:"n"`
	Sum    uint64         `json:"sum_ns"`
	Max    uint64         `json:"max_ns"`

	dense []uint64 // while recording: by bucket index
}

const histSub = 16 // buckets per power of two

func histBucket(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - 5 // v>>shift is in [16, 32)
	return histSub + shift*histSub + int(v>>uint(shift)) - histSub
}

// histBounds returns the smallest and the largest value of bucket i.
func histBounds(i int) (lo, hi uint64) {
	if i < 2*histSub {
		return uint64(i), uint64(i)
	}
	shift := (i - histSub) / histSub
	m := uint64((i-histSub)%histSub + histSub)
	return m << uint(shift), (m+1)<<uint(shift) - 1
}

// histValue is the middle of bucket i.
func histValue(i int) uint64 {
	lo, hi := histBounds(i)
	return lo + (hi-lo)/2
}

// Add records one latency.
func (h *Hist) Add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	v := uint64(d)
	b := histBucket(v)
	if b >= len(h.dense) {
		n := make([]uint64, b+64)
		copy(n, h.dense)
		h.dense = n
	}
	h.dense[b]++
	h.N++
	h.Sum += v
	if v > h.Max {
		h.Max = v
	}
}

// seal moves the recorded samples into the sparse form (for JSON).
func (h *Hist) seal() {
	for i, n := range h.dense {
		if n == 0 {
			continue
		}
		if h.Counts == nil {
			h.Counts = map[int]uint64{}
		}
		h.Counts[i] += n
	}
	h.dense = nil
}

// Merge adds o's samples to h.
func (h *Hist) Merge(o *Hist) {
	if o == nil {
		return
	}
	o.seal()
	h.seal()
	for i, n := range o.Counts {
		if h.Counts == nil {
			h.Counts = map[int]uint64{}
		}
		h.Counts[i] += n
	}
	h.N += o.N
	h.Sum += o.Sum
	if o.Max > h.Max {
		h.Max = o.Max
	}
}

// Quantile returns the latency below which a fraction q of the samples lie
// (0 without samples).
func (h *Hist) Quantile(q float64) time.Duration {
	h.seal()
	if h.N == 0 {
		return 0
	}
	idx := make([]int, 0, len(h.Counts))
	for i := range h.Counts {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	rank := uint64(q*float64(h.N) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var cum uint64
	for _, i := range idx {
		n := h.Counts[i]
		cum += n
		if cum >= rank {
			// The bucket's samples are taken as spread evenly over it,
			// and the rank's place among them places the quantile: a
			// bucket's middle would step by up to 6% between two runs
			// whose quantiles differ by far less.
			lo, hi := histBounds(i)
			pos := (float64(rank-(cum-n)) - 0.5) / float64(n) // in (0, 1)
			v := min(lo+uint64(pos*float64(hi-lo+1)), hi, max(h.Max, lo))
			return time.Duration(v)
		}
	}
	return time.Duration(h.Max)
}

// Mean is the average latency.
func (h *Hist) Mean() time.Duration {
	if h.N == 0 {
		return 0
	}
	return time.Duration(h.Sum / h.N)
}
