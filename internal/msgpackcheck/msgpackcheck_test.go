package msgpackcheck

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestHostileCountsAreRefused(t *testing.T) {
	for name, b := range map[string][]byte{
		"array32 of 2^32-1": {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		"map32 of 2^32-1":   {0xdf, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01},
		"str32 past end":    {0xdb, 0x00, 0x10, 0x00, 0x00, 'a'},
		"extension":         {0xd4, 0x01, 0x00},
		"trailing bytes":    {0x01, 0x02},
		"empty":             {},
	} {
		if err := Value(b, 16); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	deep := []byte{}
	for i := 0; i < 40; i++ {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0x01)
	if err := Value(deep, 16); err == nil {
		t.Error("40-deep nesting accepted with a limit of 16")
	}
}

func TestValidValuesPass(t *testing.T) {
	for _, v := range []any{
		map[string]any{"a": 1, "b": []any{"x", 2.5, true, nil}, "c": map[string]any{"d": []byte{1, 2}}},
		[]uint64{1, 1 << 40},
		"text",
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := Value(b, 16); err != nil {
			t.Errorf("%v: %v", v, err)
		}
	}
	b, _ := msgpack.Marshal(map[string]int{"k": 1})
	if err := Map(b, 16); err != nil {
		t.Error(err)
	}
	b, _ = msgpack.Marshal([]int{1})
	if err := Map(b, 16); err == nil {
		t.Error("array accepted as a map")
	}
}

func FuzzValue(f *testing.F) {
	for _, v := range []any{map[string]any{"a": []int{1, 2}}, "s", []byte{1}} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if Value(b, 16) != nil {
			return
		}
		// What passes must decode without a huge allocation or panic.
		var v any
		msgpack.Unmarshal(b, &v)
	})
}
