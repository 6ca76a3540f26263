// Command rdmo-plugin-counter is an RDMO handler plugin: op 16 adds 1 to a
// u64 in target memory and returns the old value.
package main

import (
	"encoding/binary"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

type counter struct{ rdmo.BaseHandler } // no cached state: no-op hooks

func (counter) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "counter", Version: "1.0.0", Ops: []uint32{16}}
}

// HandleBatch: the sub-header holds the region id and the address of the
// counter (u64 each, after the 16-byte common header).
func (counter) HandleBatch(t rdmo.Target, reqs []rdmo.Request, res []rdmo.Result) {
	for i := range reqs {
		h := reqs[i].Header
		if len(h) != rdmo.HeaderLen+16 {
			res[i] = rdmo.Fail(rdmo.StatusShortHeader, "want a 32-byte header")
			continue
		}
		region := binary.LittleEndian.Uint64(h[16:])
		addr := binary.LittleEndian.Uint64(h[24:])
		old, err := rdmo.FetchAdd(t, region, addr, 1)
		if err != nil {
			res[i] = rdmo.ResultOf(err)
			continue
		}
		res[i].Value = old
	}
}

func main() { plugin.Serve(counter{}) }
