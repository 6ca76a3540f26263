package rdmo_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/internal/genstatus"
)

// publishedCodes pins every code ever published. Codes are stable forever:
// this list may only grow at the end. A failure here means a code was
// renumbered, renamed or removed, which breaks every deployed initiator.
var publishedCodes = []string{
	0:  "OK",
	1:  "ShortHeader",
	2:  "HeaderTooLong",
	3:  "UnknownOp",
	4:  "UnknownFlags",
	5:  "PayloadMismatch",
	6:  "LengthOverflow",
	7:  "ClientMismatch",
	8:  "UnknownRegion",
	9:  "RegionNotOwned",
	10: "OutOfBounds",
	11: "QueueOverflow",
	12: "EmptyAppend",
	13: "RendezvousRefused",
	14: "TooManyInFlight",
	15: "HandlerFailed",
	16: "TargetUnreachable",
	17: "RegionGone",
	18: "Internal",
	19: "NoQueue",
	20: "UnknownPool",
	21: "PoolRefused",
}

func TestStatusCodesNeverRenumbered(t *testing.T) {
	cat := rdmo.Statuses()
	if len(cat) < len(publishedCodes) {
		t.Fatalf("catalogue has %d codes, %d were published", len(cat), len(publishedCodes))
	}
	for code, name := range publishedCodes {
		if cat[code].Name != name {
			t.Errorf("code %d is %q, was published as %q", code, cat[code].Name, name)
		}
	}
	if len(cat) > len(publishedCodes) {
		t.Errorf("new codes %v: append them to publishedCodes", cat[len(publishedCodes):])
	}
}

func TestStatusCatalogIsDense(t *testing.T) {
	names := map[string]bool{}
	texts := map[string]bool{}
	for i, s := range rdmo.Statuses() {
		if int(s.Code) != i {
			t.Errorf("row %d has code %d", i, s.Code)
		}
		if names[s.Name] || texts[s.Text] {
			t.Errorf("code %d repeats a name or text: %q / %q", s.Code, s.Name, s.Text)
		}
		names[s.Name], texts[s.Text] = true, true
		if s.Name == "" || s.Text == "" || s.Meaning == "" {
			t.Errorf("code %d has an empty column", s.Code)
		}
		if !s.Code.Known() || s.Code.Name() != s.Name || s.Code.String() != s.Text {
			t.Errorf("code %d: Known/Name/String disagree with the catalogue", s.Code)
		}
	}
}

// TestSentinels checks that each exported sentinel is the catalogue's error
// for its code, so Status.Err and the Err* variables cannot drift apart.
func TestSentinels(t *testing.T) {
	sentinels := map[string]*rdmo.WireError{
		"ShortHeader":       rdmo.ErrShortHeader,
		"HeaderTooLong":     rdmo.ErrHeaderTooLong,
		"UnknownOp":         rdmo.ErrUnknownOp,
		"UnknownFlags":      rdmo.ErrUnknownFlags,
		"PayloadMismatch":   rdmo.ErrPayloadMismatch,
		"LengthOverflow":    rdmo.ErrLengthOverflow,
		"ClientMismatch":    rdmo.ErrClientMismatch,
		"UnknownRegion":     rdmo.ErrUnknownRegion,
		"RegionNotOwned":    rdmo.ErrRegionNotOwned,
		"OutOfBounds":       rdmo.ErrOutOfBounds,
		"QueueOverflow":     rdmo.ErrQueueOverflow,
		"EmptyAppend":       rdmo.ErrEmptyAppend,
		"RendezvousRefused": rdmo.ErrRendezvousRefused,
		"TooManyInFlight":   rdmo.ErrTooManyInFlight,
		"HandlerFailed":     rdmo.ErrHandlerFailed,
		"TargetUnreachable": rdmo.ErrTargetUnreachable,
		"RegionGone":        rdmo.ErrRegionGone,
		"Internal":          rdmo.ErrInternal,
		"NoQueue":           rdmo.ErrNoQueue,
		"UnknownPool":       rdmo.ErrUnknownPool,
		"PoolRefused":       rdmo.ErrPoolRefused,
	}
	for _, s := range rdmo.Statuses() {
		if s.Code == rdmo.StatusOK {
			if s.Err != nil || s.Code.Err() != nil {
				t.Error("StatusOK must have no error")
			}
			continue
		}
		want, ok := sentinels[s.Name]
		if !ok {
			t.Errorf("no exported sentinel Err%s", s.Name)
			continue
		}
		if s.Err != want || s.Code.Err() != error(want) || want.Status != s.Code {
			t.Errorf("Err%s is not the catalogue error of code %d", s.Name, s.Code)
		}
		if want.Detail != "" {
			t.Errorf("Err%s has a detail; sentinels must be bare", s.Name)
		}
		if rdmo.StatusOf(s.Code.Err()) != s.Code {
			t.Errorf("StatusOf(Err%s) = %d", s.Name, rdmo.StatusOf(s.Code.Err()))
		}
	}
	if len(sentinels) != len(rdmo.Statuses())-1 {
		t.Errorf("%d sentinels for %d error codes", len(sentinels), len(rdmo.Statuses())-1)
	}
}

func TestWireErrorMatching(t *testing.T) {
	err := fmt.Errorf("worker: %w", &rdmo.WireError{Status: rdmo.StatusOutOfBounds, Detail: "iov 2"})
	if !errors.Is(err, rdmo.ErrOutOfBounds) || !errors.Is(err, rdmo.StatusOutOfBounds) {
		t.Error("a wrapped detailed error does not match its sentinel and status")
	}
	if errors.Is(err, rdmo.ErrUnknownRegion) || errors.Is(err, rdmo.StatusUnknownRegion) {
		t.Error("matched another status")
	}
	if errors.Is(err, (*rdmo.WireError)(nil)) {
		t.Error("matched a nil *WireError")
	}
	if errors.Is(err, io.EOF) {
		t.Error("matched an unrelated error")
	}
	if got := err.Error(); got != "worker: rdmo: address range outside the region: iov 2" {
		t.Errorf("Error() = %q", got)
	}
	if got := rdmo.ErrOutOfBounds.Error(); got != "rdmo: address range outside the region" {
		t.Errorf("sentinel Error() = %q", got)
	}
	if got := rdmo.StatusQueueOverflow.Error(); got != "rdmo: append would pass the end of the queue's region" {
		t.Errorf("Status.Error() = %q", got)
	}
}

func TestUnknownStatusFromNewerPeer(t *testing.T) {
	s := rdmo.Status(1000)
	if s.Known() {
		t.Fatal("1000 is known")
	}
	if s.Name() != "Status(1000)" || s.String() != "unknown status 1000" {
		t.Errorf("Name %q String %q", s.Name(), s.String())
	}
	err := s.Err()
	if err == nil || !errors.Is(err, s) || rdmo.StatusOf(err) != s {
		t.Errorf("unknown code must still be a matchable error: %v", err)
	}
}

func TestStatusOf(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want rdmo.Status
	}{
		{nil, rdmo.StatusOK},
		{errors.New("plugin panicked"), rdmo.StatusInternal},
		{fmt.Errorf("x: %w", rdmo.ErrRegionGone), rdmo.StatusRegionGone},
		{fmt.Errorf("x: %w", rdmo.StatusTooManyInFlight), rdmo.StatusTooManyInFlight},
		{&rdmo.WireError{Status: rdmo.StatusOK}, rdmo.StatusInternal},
		{rdmo.StatusOK, rdmo.StatusInternal},
	} {
		if got := rdmo.StatusOf(tt.err); got != tt.want {
			t.Errorf("StatusOf(%v) = %s, want %s", tt.err, got.Name(), tt.want.Name())
		}
	}
}

func TestErrorsDocUpToDate(t *testing.T) {
	path := filepath.Join("..", "docs", "ERRORS.md")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run: go generate ./rdmo)", err)
	}
	if want := genstatus.Markdown(); !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with the status catalogue: run go generate ./rdmo", path)
	}
}

func TestDefineOpAndStatus(t *testing.T) {
	op := rdmo.DefineOp(rdmo.OpUserBase+200, "test-op")
	if got := rdmo.OpName(op); got != "test-op(216)" {
		t.Errorf("OpName = %q", got)
	}
	if got := rdmo.OpName(rdmo.OpUserBase + 201); got != "user(217)" {
		t.Errorf("OpName of an undefined op = %q", got)
	}
	st := rdmo.DefineStatus(rdmo.StatusUserBase+9, "TestThing", "test thing happened")
	if st.Name() != "TestThing" || st.String() != "test thing happened" || !errors.Is(st.Err(), st) {
		t.Errorf("defined status: %s / %s / %v", st.Name(), st, st.Err())
	}
	if got := (rdmo.StatusUserBase + 10).Name(); got != "User(65546)" {
		t.Errorf("undefined user status name %q", got)
	}
	for _, f := range []func(){
		func() { rdmo.DefineOp(rdmo.OpUserBase+200, "other") },
		func() { rdmo.DefineOp(3, "batch") },
		func() { rdmo.DefineStatus(rdmo.StatusUserBase+9, "Other", "") },
		func() { rdmo.DefineStatus(rdmo.StatusInternal, "Mine", "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("accepted a conflicting or out-of-range definition")
				}
			}()
			f()
		}()
	}
	if got := rdmo.TruncateDetail("ééé", 3); got != "é" {
		t.Errorf("TruncateDetail cut inside a rune: %q", got)
	}
}

// TestRegisterStatus: the run-time form of DefineStatus (a plugin's
// handshake) refuses what DefineStatus panics on, and bad names, with an
// error; UserStatuses lists what the process knows, in code order.
func TestRegisterStatus(t *testing.T) {
	a, b := rdmo.StatusUserBase+0x7a01, rdmo.StatusUserBase+0x7a00
	if err := rdmo.RegisterStatus(a, "RegA", "reg a"); err != nil {
		t.Fatal(err)
	}
	if err := rdmo.RegisterStatus(b, "RegB", ""); err != nil {
		t.Fatal(err)
	}
	if err := rdmo.RegisterStatus(a, "RegA", "other text"); err != nil {
		t.Errorf("same name again: %v", err)
	}
	if a.Name() != "RegA" || a.String() != "reg a" || !errors.Is(a.Err(), a) {
		t.Errorf("registered status: %s / %s / %v", a.Name(), a, a.Err())
	}
	for _, bad := range []struct {
		code       rdmo.Status
		name, text string
	}{
		{a, "Other", ""},
		{rdmo.StatusInternal, "Mine", ""},
		{rdmo.StatusUserLast + 1, "Past", ""},
		{rdmo.StatusUserBase + 0x7a02, "", "no name"},
		{rdmo.StatusUserBase + 0x7a02, strings.Repeat("n", rdmo.MaxStatusName+1), ""},
		{rdmo.StatusUserBase + 0x7a02, "LongText", strings.Repeat("t", rdmo.MaxStatusText+1)},
		{rdmo.StatusUserBase + 0x7a02, "Bad\xff", ""},
	} {
		if err := rdmo.RegisterStatus(bad.code, bad.name, bad.text); err == nil {
			t.Errorf("RegisterStatus(%d, %.20q, %.20q) accepted", bad.code, bad.name, bad.text)
		}
	}
	// All or nothing: the good entry before the conflicting one stays out.
	if err := rdmo.RegisterStatuses([]rdmo.StatusInfo{{Code: rdmo.StatusUserBase + 0x7a02, Name: "Fine"}, {Code: a, Name: "Clash"}}); err == nil {
		t.Error("RegisterStatuses accepted a conflicting entry")
	}
	if err := rdmo.RegisterStatuses([]rdmo.StatusInfo{{Code: rdmo.StatusUserBase + 0x7a02, Name: "X"}, {Code: rdmo.StatusUserBase + 0x7a02, Name: "Y"}}); err == nil {
		t.Error("RegisterStatuses accepted one code under two names")
	}
	if got := (rdmo.StatusUserBase + 0x7a02).Name(); got != "User(96770)" {
		t.Errorf("a refused registration left a name: %q", got)
	}
	var seen []rdmo.Status
	for _, s := range rdmo.UserStatuses() {
		if s.Code == a || s.Code == b {
			seen = append(seen, s.Code)
		}
		if s.Name != s.Code.Name() || s.Err == nil {
			t.Errorf("UserStatuses entry %+v", s)
		}
	}
	if !slices.Equal(seen, []rdmo.Status{b, a}) {
		t.Errorf("UserStatuses has %v of the registered codes, want %v (code order)", seen, []rdmo.Status{b, a})
	}
}
