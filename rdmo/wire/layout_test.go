package wire_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// The layout test lets a C compiler, not our reading of the C headers, decide
// the wire format: it compiles the reference structs (DOCA 3.0
// applications/urom_rdmo) and ours, prints every sizeof and offsetof, and
// encodes sample messages with memcpy, exactly as the reference programs
// build them. Package rdmo must stay free of cgo, and test files cannot use
// cgo, so the C program is built and run as a separate process.

// Sample values, shared by the C program and the Go encoders. Every byte of
// each field differs, so a misplaced or misordered field shows in the hex.
var (
	sampleFlushHdr   = wire.Header{ClientID: 0x1122334455667788, Op: rdmo.OpFlush, Flags: rdmo.FlagFence}
	sampleFlush      = rdmo.FlushHeader{FlushID: 0xBEEF0000BEEF}
	sampleAppendHdr  = wire.Header{ClientID: 0x0102030405060708, Op: rdmo.OpAppend, Flags: rdmo.FlagFence | rdmo.FlagAck}
	sampleAppend     = rdmo.AppendHeader{PtrAddr: 0x00007FFFABCD0008, PtrRkey: 0x55AA55AA66BB66BB, DataRkey: 0xFEDCBA9876543210}
	sampleScatterHdr = wire.Header{ClientID: 9, Op: rdmo.OpScatter}
	sampleScatter    = rdmo.ScatterHeader{Count: 2}
	sampleIOVs       = []wire.IOV{
		{Addr: 0x1112131415161718, Rkey: 0x2122232425262728, Len: 5},
		{Addr: 0x3132333435363738, Rkey: 0x4142434445464748, Len: 3},
	}
	sampleIOVData  = []string{"ABCDE", "xyz"}
	sampleFlushRsp = wire.FlushResponse{FlushID: 0xBEEF, Failed: 3, FirstOp: rdmo.OpScatter,
		FirstStatus: rdmo.StatusOutOfBounds, FirstSeq: 0x0123456789ABCDEF}
	sampleAck = wire.AckResponse{Op: rdmo.OpUserBase + 1, Seq: 0x1020304050607080,
		Status: rdmo.StatusHandlerFailed, Value: 0xDEADBEEFCAFEF00D}
)

const layoutProgram = `#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Reference: NVIDIA DOCA 3.0 applications/urom_rdmo. */
struct urom_rdmo_hdr { uint64_t id; uint32_t op_id; uint32_t flags; };
struct urom_rdmo_append_hdr { uint64_t ptr_addr; uint64_t ptr_rkey; uint64_t data_rkey; };
struct urom_rdmo_flush_hdr { uint64_t flush_id; };
struct urom_rdmo_scatter_hdr { uint64_t count; };
struct urom_rdmo_scatter_iov { uint64_t addr; uint64_t rkey; uint16_t len; };
struct urom_rdmo_rsp_hdr { uint32_t rsp_id; };
struct urom_rdmo_flush_rsp_hdr { uint64_t flush_id; };

/* Extension: the ack response, a naturally aligned struct. */
struct rdmo_ack_rsp {
	uint32_t rsp_id; uint32_t op_id; uint64_t seq;
	uint32_t status; uint32_t reserved; uint64_t value;
};
struct rdmo_ack_result_rsp {
	struct rdmo_ack_rsp ack; uint32_t data_len; uint32_t detail_len;
};
/* Extension: the ACK group's AM header (section 14). */
struct rdmo_ack_group_rsp {
	uint32_t rsp_id; uint32_t count; uint64_t reserved;
};

/* Extension: the whole extended flush response. The reference places
 * flush_id at offset 4 (rsp_hdr + 1), unaligned, so no natural struct can
 * describe the message; packed reproduces the reference prefix, and the
 * fields after it happen to sit at naturally aligned offsets. */
struct rdmo_flush_rsp_ext {
	uint32_t rsp_id; uint64_t flush_id;
	uint32_t failed; uint32_t first_op; uint32_t first_status; uint64_t first_seq;
} __attribute__((packed));

/* Extension: the BATCH container (op 3). Its AM header is urom_rdmo_hdr then
 * rdmo_batch_hdr; its data is count entries, each an rdmo_batch_entry, the
 * inner header, the inner payload and zero padding to a multiple of 8. */
struct rdmo_batch_hdr { uint64_t count; };
struct rdmo_batch_entry { uint16_t hdr_len; uint16_t flags; uint32_t payload_len; };

#define SIZE(s) printf("size %s %zu\n", #s, sizeof(struct s))
#define OFF(s, f) printf("off %s.%s %zu\n", #s, #f, offsetof(struct s, f))

static unsigned char buf[1024];

static void hex(const char *name, size_t n)
{
	size_t i;
	printf("hex %s ", name);
	for (i = 0; i < n; i++)
		printf("%02x", buf[i]);
	printf("\n");
}

/* Build a request the way the reference initiator does: the op sub-header
 * directly after urom_rdmo_hdr (rdmo_hdr + 1). */
static size_t request(uint64_t id, uint32_t op, uint32_t flags, const void *sub, size_t sub_len)
{
	struct urom_rdmo_hdr h;
	memset(&h, 0, sizeof(h));
	h.id = id;
	h.op_id = op;
	h.flags = flags;
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), sub, sub_len);
	return sizeof(h) + sub_len;
}

/* Append one batch entry at buf + n; returns the new length. */
static size_t batch_entry(size_t n, const void *hdr, size_t hlen, const void *payload, size_t plen)
{
	struct rdmo_batch_entry e;
	memset(&e, 0, sizeof(e));
	e.hdr_len = (uint16_t)hlen;
	e.payload_len = (uint32_t)plen;
	memcpy(buf + n, &e, sizeof(e));
	memcpy(buf + n + sizeof(e), hdr, hlen);
	memcpy(buf + n + sizeof(e) + hlen, payload, plen);
	n += sizeof(e) + hlen + plen;
	while (n % 8)
		buf[n++] = 0;
	return n;
}

int main(void)
{
	size_t n;

	SIZE(urom_rdmo_hdr);
	OFF(urom_rdmo_hdr, id);
	OFF(urom_rdmo_hdr, op_id);
	OFF(urom_rdmo_hdr, flags);
	SIZE(urom_rdmo_append_hdr);
	OFF(urom_rdmo_append_hdr, ptr_addr);
	OFF(urom_rdmo_append_hdr, ptr_rkey);
	OFF(urom_rdmo_append_hdr, data_rkey);
	SIZE(urom_rdmo_flush_hdr);
	OFF(urom_rdmo_flush_hdr, flush_id);
	SIZE(urom_rdmo_scatter_hdr);
	OFF(urom_rdmo_scatter_hdr, count);
	SIZE(urom_rdmo_scatter_iov);
	OFF(urom_rdmo_scatter_iov, addr);
	OFF(urom_rdmo_scatter_iov, rkey);
	OFF(urom_rdmo_scatter_iov, len);
	SIZE(urom_rdmo_rsp_hdr);
	OFF(urom_rdmo_rsp_hdr, rsp_id);
	SIZE(urom_rdmo_flush_rsp_hdr);
	OFF(urom_rdmo_flush_rsp_hdr, flush_id);
	SIZE(rdmo_ack_rsp);
	OFF(rdmo_ack_rsp, rsp_id);
	OFF(rdmo_ack_rsp, op_id);
	OFF(rdmo_ack_rsp, seq);
	OFF(rdmo_ack_rsp, status);
	OFF(rdmo_ack_rsp, reserved);
	OFF(rdmo_ack_rsp, value);
	SIZE(rdmo_ack_result_rsp);
	OFF(rdmo_ack_result_rsp, data_len);
	OFF(rdmo_ack_result_rsp, detail_len);
	SIZE(rdmo_ack_group_rsp);
	OFF(rdmo_ack_group_rsp, count);
	SIZE(rdmo_batch_hdr);
	OFF(rdmo_batch_hdr, count);
	SIZE(rdmo_batch_entry);
	OFF(rdmo_batch_entry, hdr_len);
	OFF(rdmo_batch_entry, flags);
	OFF(rdmo_batch_entry, payload_len);
	SIZE(rdmo_flush_rsp_ext);
	OFF(rdmo_flush_rsp_ext, rsp_id);
	OFF(rdmo_flush_rsp_ext, flush_id);
	OFF(rdmo_flush_rsp_ext, failed);
	OFF(rdmo_flush_rsp_ext, first_op);
	OFF(rdmo_flush_rsp_ext, first_status);
	OFF(rdmo_flush_rsp_ext, first_seq);

	{
		struct urom_rdmo_flush_hdr f;
		f.flush_id = {{.FlushID}}ULL;
		hex("flush_request", request({{.FlushHdr.ClientID}}ULL, {{.FlushHdr.Op}}u, {{.FlushHdr.Flags}}u, &f, sizeof(f)));
	}
	{
		struct urom_rdmo_append_hdr a;
		a.ptr_addr = {{.Append.PtrAddr}}ULL;
		a.ptr_rkey = {{.Append.PtrRkey}}ULL;
		a.data_rkey = {{.Append.DataRkey}}ULL;
		hex("append_request", request({{.AppendHdr.ClientID}}ULL, {{.AppendHdr.Op}}u, {{.AppendHdr.Flags}}u, &a, sizeof(a)));
	}
	{
		struct urom_rdmo_scatter_hdr s;
		s.count = {{.Scatter.Count}}ULL;
		hex("scatter_request", request({{.ScatterHdr.ClientID}}ULL, {{.ScatterHdr.Op}}u, {{.ScatterHdr.Flags}}u, &s, sizeof(s)));
	}
	{
		/* As the reference initiator builds it: each descriptor right after
		 * the previous chunk's data, padding zeroed by memset. */
		struct urom_rdmo_scatter_iov iov;
		n = 0;
{{range .IOVs}}		memset(&iov, 0, sizeof(iov));
		iov.addr = {{.IOV.Addr}}ULL;
		iov.rkey = {{.IOV.Rkey}}ULL;
		iov.len = {{.IOV.Len}};
		memcpy(buf + n, &iov, sizeof(iov));
		memcpy(buf + n + sizeof(iov), "{{.Data}}", iov.len);
		n += sizeof(iov) + iov.len;
{{end}}		hex("scatter_payload", n);
	}
	{
		struct rdmo_batch_hdr b;
		b.count = 2;
		hex("batch_request", request({{.BatchClient}}ULL, 3u, 0u, &b, sizeof(b)));
	}
	{
		/* Two entries: the sample APPEND with a 5-byte payload (padded by
		 * 3), then the sample FLUSH. */
		unsigned char a[40], f[24];
		struct urom_rdmo_append_hdr ah;
		struct urom_rdmo_flush_hdr fh;
		ah.ptr_addr = {{.Append.PtrAddr}}ULL;
		ah.ptr_rkey = {{.Append.PtrRkey}}ULL;
		ah.data_rkey = {{.Append.DataRkey}}ULL;
		request({{.AppendHdr.ClientID}}ULL, {{.AppendHdr.Op}}u, {{.AppendHdr.Flags}}u, &ah, sizeof(ah));
		memcpy(a, buf, sizeof(a));
		fh.flush_id = {{.FlushID}}ULL;
		request({{.FlushHdr.ClientID}}ULL, {{.FlushHdr.Op}}u, {{.FlushHdr.Flags}}u, &fh, sizeof(fh));
		memcpy(f, buf, sizeof(f));
		n = batch_entry(0, a, sizeof(a), "HELLO", 5);
		n = batch_entry(n, f, sizeof(f), "", 0);
		hex("batch_payload", n);
	}
	{
		/* As the reference worker builds it: flush_rsp at rsp_hdr + 1. */
		struct urom_rdmo_rsp_hdr r;
		struct urom_rdmo_flush_rsp_hdr f;
		r.rsp_id = 0;
		f.flush_id = {{.FlushRsp.FlushID}}ULL;
		memcpy(buf, &r, sizeof(r));
		memcpy(buf + sizeof(r), &f, sizeof(f));
		hex("reference_flush_response", sizeof(r) + sizeof(f));
	}
	{
		struct rdmo_flush_rsp_ext e;
		e.rsp_id = 0;
		e.flush_id = {{.FlushRsp.FlushID}}ULL;
		e.failed = {{.FlushRsp.Failed}}u;
		e.first_op = {{.FlushRsp.FirstOp}}u;
		e.first_status = {{.FirstStatus}}u;
		e.first_seq = {{.FlushRsp.FirstSeq}}ULL;
		memcpy(buf, &e, sizeof(e));
		hex("flush_response", sizeof(e));
	}
	{
		struct rdmo_ack_rsp a;
		memset(&a, 0, sizeof(a));
		a.rsp_id = 1;
		a.op_id = {{.Ack.Op}}u;
		a.seq = {{.Ack.Seq}}ULL;
		a.status = {{.AckStatus}}u;
		a.value = {{.Ack.Value}}ULL;
		memcpy(buf, &a, sizeof(a));
		hex("ack", sizeof(a));
	}
	return 0;
}
`

// cCompiler finds the compiler cgo would use, falling back to cc.
func cCompiler(t *testing.T) []string {
	t.Helper()
	var cmd []string
	if out, err := exec.Command("go", "env", "CC").Output(); err == nil {
		cmd = strings.Fields(string(out))
	}
	if len(cmd) == 0 {
		cmd = []string{"cc"}
	}
	if _, err := exec.LookPath(cmd[0]); err != nil {
		msg := fmt.Sprintf("no C compiler (%q: %v): the wire layout cannot be checked against C", cmd[0], err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return cmd
}

// runLayoutProgram compiles and runs the C program and returns its sizes
// and offsets (keyed "size NAME" / "off NAME.FIELD") and hex samples.
func runLayoutProgram(t *testing.T) (map[string]uint64, map[string][]byte) {
	t.Helper()
	cc := cCompiler(t)
	src, err := renderLayoutProgram()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfile := filepath.Join(dir, "layout.c")
	bin := filepath.Join(dir, "layout")
	if err := os.WriteFile(cfile, src, 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(cc[1:], "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o", bin, cfile)
	if out, err := exec.Command(cc[0], args...).CombinedOutput(); err != nil {
		t.Fatalf("compiling the layout program: %v\n%s\n--- source ---\n%s", err, out, src)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("running the layout program: %v", err)
	}
	layout := map[string]uint64{}
	samples := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Fatalf("unexpected output line %q", sc.Text())
		}
		switch f[0] {
		case "size", "off":
			v, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			layout[f[0]+" "+f[1]] = v
		case "hex":
			b, err := hex.DecodeString(f[2])
			if err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			samples[f[1]] = b
		default:
			t.Fatalf("unexpected output line %q", sc.Text())
		}
	}
	return layout, samples
}

func renderLayoutProgram() ([]byte, error) {
	type iovSample struct {
		IOV  wire.IOV
		Data string
	}
	var iovs []iovSample
	for i, iov := range sampleIOVs {
		iovs = append(iovs, iovSample{iov, sampleIOVData[i]})
	}
	tmpl, err := template.New("layout.c").Parse(layoutProgram)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = tmpl.Execute(&b, map[string]any{
		"FlushHdr": sampleFlushHdr, "FlushID": sampleFlush.FlushID,
		"AppendHdr": sampleAppendHdr, "Append": sampleAppend,
		"ScatterHdr": sampleScatterHdr, "Scatter": sampleScatter,
		"IOVs":     iovs,
		"FlushRsp": sampleFlushRsp, "FirstStatus": uint32(sampleFlushRsp.FirstStatus),
		"Ack": sampleAck, "AckStatus": uint32(sampleAck.Status),
		"BatchClient": sampleAppendHdr.ClientID,
	})
	return b.Bytes(), err
}

// TestCLayout compiles the C program once and checks the Go codec against
// it twice: field by field, and byte by byte on sample messages.
func TestCLayout(t *testing.T) {
	layout, samples := runLayoutProgram(t)
	t.Run("sizes and offsets", func(t *testing.T) { checkLayout(t, layout) })
	t.Run("encodings", func(t *testing.T) { checkEncodings(t, samples) })
}

func checkLayout(t *testing.T, c map[string]uint64) {
	get := func(key string) int {
		t.Helper()
		v, ok := c[key]
		if !ok {
			t.Fatalf("the C program did not report %q", key)
		}
		return int(v)
	}
	hdr := get("size urom_rdmo_hdr")
	rsp := get("size urom_rdmo_rsp_hdr")
	tests := []struct {
		what   string
		c      int
		goSide int
	}{
		{"sizeof(urom_rdmo_hdr)", hdr, wire.HeaderLen},
		{"urom_rdmo_hdr.id", get("off urom_rdmo_hdr.id"), wire.HeaderClientIDOffset},
		{"urom_rdmo_hdr.op_id", get("off urom_rdmo_hdr.op_id"), wire.HeaderOpOffset},
		{"urom_rdmo_hdr.flags", get("off urom_rdmo_hdr.flags"), wire.HeaderFlagsOffset},
		{"sub-header offset", hdr, wire.SubHeaderOffset},

		{"flush header length", hdr + get("size urom_rdmo_flush_hdr"), wire.FlushHeaderLen},
		{"flush_id", hdr + get("off urom_rdmo_flush_hdr.flush_id"), wire.FlushIDOffset},

		{"append header length", hdr + get("size urom_rdmo_append_hdr"), wire.AppendHeaderLen},
		{"ptr_addr", hdr + get("off urom_rdmo_append_hdr.ptr_addr"), wire.AppendPtrAddrOffset},
		{"ptr_rkey", hdr + get("off urom_rdmo_append_hdr.ptr_rkey"), wire.AppendPtrRkeyOffset},
		{"data_rkey", hdr + get("off urom_rdmo_append_hdr.data_rkey"), wire.AppendDataRkeyOffset},

		{"scatter header length", hdr + get("size urom_rdmo_scatter_hdr"), wire.ScatterHeaderLen},
		{"count", hdr + get("off urom_rdmo_scatter_hdr.count"), wire.ScatterCountOffset},

		{"sizeof(urom_rdmo_scatter_iov)", get("size urom_rdmo_scatter_iov"), wire.IOVDescLen},
		{"iov.addr", get("off urom_rdmo_scatter_iov.addr"), wire.IOVAddrOffset},
		{"iov.rkey", get("off urom_rdmo_scatter_iov.rkey"), wire.IOVRkeyOffset},
		{"iov.len", get("off urom_rdmo_scatter_iov.len"), wire.IOVLenOffset},

		{"rsp_id", get("off urom_rdmo_rsp_hdr.rsp_id"), wire.ResponseIDOffset},
		{"reference flush response length", rsp + get("size urom_rdmo_flush_rsp_hdr"), wire.ReferenceFlushResponseLen},
		{"reference flush_id (rsp_hdr + 1)", rsp + get("off urom_rdmo_flush_rsp_hdr.flush_id"), wire.FlushResponseFlushIDOffset},

		{"sizeof(rdmo_flush_rsp_ext)", get("size rdmo_flush_rsp_ext"), wire.FlushResponseLen},
		{"ext rsp_id", get("off rdmo_flush_rsp_ext.rsp_id"), wire.ResponseIDOffset},
		{"ext flush_id", get("off rdmo_flush_rsp_ext.flush_id"), wire.FlushResponseFlushIDOffset},
		{"ext failed", get("off rdmo_flush_rsp_ext.failed"), wire.FlushResponseFailedOffset},
		{"ext first_op", get("off rdmo_flush_rsp_ext.first_op"), wire.FlushResponseFirstOpOffset},
		{"ext first_status", get("off rdmo_flush_rsp_ext.first_status"), wire.FlushResponseFirstStatusOffset},
		{"ext first_seq", get("off rdmo_flush_rsp_ext.first_seq"), wire.FlushResponseFirstSeqOffset},

		{"sizeof(rdmo_ack_rsp)", get("size rdmo_ack_rsp"), wire.AckResponseLen},
		{"ack rsp_id", get("off rdmo_ack_rsp.rsp_id"), wire.ResponseIDOffset},
		{"ack op_id", get("off rdmo_ack_rsp.op_id"), wire.AckOpOffset},
		{"ack seq", get("off rdmo_ack_rsp.seq"), wire.AckSeqOffset},
		{"ack status", get("off rdmo_ack_rsp.status"), wire.AckStatusOffset},
		{"ack reserved", get("off rdmo_ack_rsp.reserved"), wire.AckReservedOffset},
		{"ack value", get("off rdmo_ack_rsp.value"), wire.AckValueOffset},
		{"sizeof(rdmo_ack_result_rsp)", get("size rdmo_ack_result_rsp"), wire.AckResultLen},
		{"ack data_len", get("off rdmo_ack_result_rsp.data_len"), wire.AckDataLenOffset},
		{"ack detail_len", get("off rdmo_ack_result_rsp.detail_len"), wire.AckDetailLenOffset},
		{"sizeof(rdmo_ack_group_rsp)", get("size rdmo_ack_group_rsp"), wire.AckGroupHeaderLen},
		{"ack group count", get("off rdmo_ack_group_rsp.count"), wire.AckGroupCountOffset},

		{"batch header length", hdr + get("size rdmo_batch_hdr"), wire.BatchHeaderLen},
		{"batch count", hdr + get("off rdmo_batch_hdr.count"), wire.BatchCountOffset},
		{"sizeof(rdmo_batch_entry)", get("size rdmo_batch_entry"), wire.BatchEntryHeaderLen},
		{"entry hdr_len", get("off rdmo_batch_entry.hdr_len"), wire.BatchEntryHdrLenOffset},
		{"entry flags", get("off rdmo_batch_entry.flags"), wire.BatchEntryFlagsOffset},
		{"entry payload_len", get("off rdmo_batch_entry.payload_len"), wire.BatchEntryPayloadLenOffset},
	}
	for _, tt := range tests {
		if tt.c != tt.goSide {
			t.Errorf("%s: C says %d, the Go codec uses %d", tt.what, tt.c, tt.goSide)
		}
	}
	// The extension must not disturb what a reference initiator reads.
	if get("off rdmo_flush_rsp_ext.failed") != wire.ReferenceFlushResponseLen {
		t.Error("the flush extension does not start right after the reference 12 bytes")
	}
	if wire.FlushResponseFirstSeqOffset%8 != 0 || wire.AckSeqOffset%8 != 0 || wire.AckValueOffset%8 != 0 {
		t.Error("an extension u64 is not naturally aligned")
	}
}

func checkEncodings(t *testing.T, c map[string][]byte) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("big-endian host: C's memcpy bytes are not the little-endian wire format")
	}

	var payload []byte
	for i, iov := range sampleIOVs {
		var err error
		if payload, err = wire.AppendIOV(payload, iov, []byte(sampleIOVData[i])); err != nil {
			t.Fatal(err)
		}
	}
	appendReq := wire.AppendAppendRequest(nil, sampleAppendHdr, sampleAppend)
	batchData, err := wire.AppendBatchEntry(nil, appendReq, []byte("HELLO"))
	if err != nil {
		t.Fatal(err)
	}
	if batchData, err = wire.AppendBatchEntry(batchData, wire.AppendFlushRequest(nil, sampleFlushHdr, sampleFlush), nil); err != nil {
		t.Fatal(err)
	}
	goSide := map[string][]byte{
		"batch_request":            wire.AppendBatchRequest(nil, wire.Header{ClientID: sampleAppendHdr.ClientID}, wire.BatchHeader{Count: 2}),
		"batch_payload":            batchData,
		"flush_request":            wire.AppendFlushRequest(nil, sampleFlushHdr, sampleFlush),
		"append_request":           wire.AppendAppendRequest(nil, sampleAppendHdr, sampleAppend),
		"scatter_request":          wire.AppendScatterRequest(nil, sampleScatterHdr, sampleScatter),
		"scatter_payload":          payload,
		"reference_flush_response": wire.AppendReferenceFlushResponse(nil, sampleFlushRsp.FlushID),
		"flush_response":           wire.AppendFlushResponse(nil, sampleFlushRsp),
		"ack":                      wire.AppendAck(nil, sampleAck),
	}
	for name, want := range goSide {
		got, ok := c[name]
		if !ok {
			t.Errorf("the C program did not encode %s", name)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n C  %x\n Go %x", name, got, want)
		}
	}

	// And the other direction: the Go decoders read the C bytes back to the
	// sample values.
	if r, err := wire.ParseRequest(c["flush_request"]); err != nil || r.Header != sampleFlushHdr || r.Flush != sampleFlush {
		t.Errorf("flush request from C: %+v, %v", r, err)
	}
	if r, err := wire.ParseRequest(c["append_request"]); err != nil || r.Header != sampleAppendHdr || r.Append != sampleAppend {
		t.Errorf("append request from C: %+v, %v", r, err)
	}
	scatter, err := wire.ParseRequest(c["scatter_request"])
	if err != nil || scatter.Header != sampleScatterHdr || scatter.Scatter != sampleScatter {
		t.Errorf("scatter request from C: %+v, %v", scatter, err)
	}
	if err := scatter.CheckPayload(c["scatter_payload"]); err != nil {
		t.Errorf("scatter payload from C: %v", err)
	}
	i := 0
	err = wire.ForEachIOV(c["scatter_payload"], sampleScatter.Count, func(iov wire.IOV, data []byte) error {
		if iov != sampleIOVs[i] || string(data) != sampleIOVData[i] {
			t.Errorf("iov %d from C: %+v %q", i, iov, data)
		}
		i++
		return nil
	})
	if err != nil {
		t.Errorf("scatter payload from C: %v", err)
	}
	if r, err := wire.ParseFlushResponse(c["reference_flush_response"]); err != nil || r.FlushID != sampleFlushRsp.FlushID || r.Extended {
		t.Errorf("reference flush response from C: %+v, %v", r, err)
	}
	want := sampleFlushRsp
	want.Extended = true
	if r, err := wire.ParseFlushResponse(c["flush_response"]); err != nil || r != want {
		t.Errorf("flush response from C: %+v, %v", r, err)
	}
	if a, err := wire.ParseAck(c["ack"]); err != nil || a != sampleAck {
		t.Errorf("ack from C: %+v, %v", a, err)
	}
	br, err := wire.ParseRequest(c["batch_request"])
	if err != nil || br.Header.Op != rdmo.OpBatch || br.Batch.Count != 2 {
		t.Fatalf("batch request from C: %+v, %v", br, err)
	}
	it := wire.NewBatchIter(c["batch_payload"], br.Batch.Count)
	var inner []wire.RequestHeader
	for it.Next() {
		r, err := it.Request()
		if err != nil {
			t.Errorf("batch entry %d from C: %v", len(inner), err)
		}
		if len(inner) == 0 && string(it.Payload()) != "HELLO" {
			t.Errorf("batch entry 0 payload from C: %q", it.Payload())
		}
		inner = append(inner, r)
	}
	if it.Err() != nil || len(inner) != 2 || inner[0].Append != sampleAppend || inner[1].Flush != sampleFlush {
		t.Errorf("batch payload from C: %+v, %v", inner, it.Err())
	}
}
