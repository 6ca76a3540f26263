package ucp

import (
	"os"
	"strconv"
	"strings"
)

// A shared-memory transport (posix, sysv) delivers a message of more than a
// few hundred bytes through a descriptor of the receiver's: the sender maps
// the receiver's pool of descriptors and copies the message into the one
// its FIFO slot names. Both the descriptors a context receives into and
// the largest message it sends in one descriptor are UCX_MM_SEG_SIZE, 8 KiB
// and 64 bytes by default; a larger message is cut into
// fragments that the receiver's UCX copies together again. UCX does not
// compare the two sides' sizes: a sender whose segment is larger than its
// receiver's writes past the receiver's descriptor. So a context may carry
// large messages in one piece (ContextOptions.LargeShmSegments) only when
// every peer it sends to receives into descriptors at least as large.

// ShmSegmentLarge is the shared-memory segment (UCX_MM_SEG_SIZE) of a
// context made with ContextOptions.LargeShmSegments: the largest multiple
// of 8 below 64 KiB. A FIFO slot records the length of the message in its
// descriptor in 16 bits (uct_mm_fifo_element_t, UCX 1.13 to 1.19), and UCX
// does not check the segment against it: with a segment of 65600 bytes
// a message of 64 KiB arrived empty, and one of 200 KiB (in 64 KiB
// fragments) crashed the receiver (TestLargeShmSegmentsMessage).
const ShmSegmentLarge = 64<<10 - 8

// shmRxBufsGrow is how many descriptors a large-segment context's
// shared-memory interface adds to its receive pool at a time
// (UCX_MM_RX_BUFS_GROW). UCX's 512 would map 32 MiB of shared memory at
// each growth with 64 KiB descriptors; 64 covers the FIFO's 64 slots and
// grows by 4 MiB.
const shmRxBufsGrow = 64

// shmSegmentEnv are the environment variables that set the segment
// (UCX_MM_SEG_SIZE sets both transports'). When one is set the user chose,
// and LargeShmSegments leaves the segment alone.
var shmSegmentEnv = []string{"UCX_MM_SEG_SIZE", "UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE"}

// withShmSegments returns cfg with the large segment set, unless cfg or
// the environment sets one, or the context's transport list leaves out
// both shared-memory transports (cfg itself is not modified). UCX warns
// "invalid configurations" for every cached setting no interface of a
// context used: a TCP-only worker would print one at each start.
func withShmSegments(cfg map[string]string) map[string]string {
	if !shmSelected(cfg) {
		return cfg
	}
	for _, k := range shmSegmentEnv {
		if _, set := os.LookupEnv(k); set {
			return cfg
		}
		if _, set := cfg[strings.TrimPrefix(k, "UCX_")]; set {
			return cfg
		}
	}
	out := make(map[string]string, len(cfg)+2)
	for k, v := range cfg {
		out[k] = v
	}
	out["MM_SEG_SIZE"] = strconv.Itoa(ShmSegmentLarge)
	_, inCfg := cfg["MM_RX_BUFS_GROW"]
	if _, inEnv := os.LookupEnv("UCX_MM_RX_BUFS_GROW"); !inCfg && !inEnv {
		out["MM_RX_BUFS_GROW"] = strconv.Itoa(shmRxBufsGrow)
	}
	return out
}

// ShmSegmentsLarge reports whether a context of this process made with
// ContextOptions.LargeShmSegments and Config cfg (nil: none) receives
// shared-memory messages into descriptors of at least ShmSegmentLarge
// bytes on both transports. A segment cfg or the environment sets wins
// over the large one (withShmSegments), so it is false when such a segment
// is smaller, or one this function cannot read, or when the environment
// names one transport's only (the other keeps UCX's default, 8 KiB).
func ShmSegmentsLarge(cfg map[string]string) bool {
	large := func(v string) bool {
		n, ok := parseMemUnits(v)
		return ok && n >= ShmSegmentLarge
	}
	cfgSet := false
	for _, k := range shmSegmentEnv {
		if v, set := cfg[strings.TrimPrefix(k, "UCX_")]; set {
			cfgSet = true
			if !large(v) {
				return false
			}
		}
	}
	if cfgSet {
		// Only MM_SEG_SIZE reaches the transports through a context's
		// configuration (UCX applies it to both); POSIX_ and SYSV_ do not.
		return cfg["MM_SEG_SIZE"] != ""
	}
	mm, mmSet := os.LookupEnv("UCX_MM_SEG_SIZE")
	anySet := mmSet
	for _, k := range shmSegmentEnv[1:] {
		if _, set := os.LookupEnv(k); set {
			anySet = true
		}
	}
	if !anySet {
		return true
	}
	for _, k := range shmSegmentEnv[1:] {
		v, set := os.LookupEnv(k)
		if !set {
			if !mmSet {
				return false // UCX's default, 8 KiB
			}
			v = mm
		}
		if !large(v) {
			return false
		}
	}
	return true
}

// parseMemUnits reads a size as UCX's memory units do: a number of bytes,
// optionally followed by b, k, m or g (powers of 1024, either case).
func parseMemUnits(s string) (int64, bool) {
	s = strings.TrimSpace(strings.ToLower(s))
	s = strings.TrimSuffix(s, "b")
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mul, s = 1<<10, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "m"):
		mul, s = 1<<20, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "g"):
		mul, s = 1<<30, strings.TrimSuffix(s, "g")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mul {
		return 0, false
	}
	return n * mul, true
}

// shmSelected reports whether a context with Config cfg may open a
// shared-memory transport (sysv, posix): its transport list, cfg's TLS or
// else UCX_TLS, is unset, names one of them or an alias that includes them
// (all, shm, sm, mm), or excludes ("^...") not both.
func shmSelected(cfg map[string]string) bool {
	tls, ok := cfg["TLS"]
	if !ok {
		tls, ok = os.LookupEnv("UCX_TLS")
	}
	tls = strings.ToLower(strings.TrimSpace(tls))
	if !ok || tls == "" {
		return true
	}
	exclude := strings.HasPrefix(tls, "^")
	names := map[string]bool{}
	for _, n := range strings.Split(strings.TrimPrefix(tls, "^"), ",") {
		names[strings.TrimSuffix(strings.TrimSpace(n), "\\")] = true
	}
	shm := names["shm"] || names["sm"] || names["mm"]
	if exclude {
		return !shm && !(names["sysv"] && names["posix"])
	}
	return shm || names["all"] || names["sysv"] || names["posix"]
}
