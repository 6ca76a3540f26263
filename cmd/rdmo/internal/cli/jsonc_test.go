package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestStripJSONC(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", `{"a": 1}`, `{"a": 1}`},
		{"line comment", "{\n// c\n\"a\": 1}", "{\n    \n\"a\": 1}"},
		{"line comment at EOF", "{}// end", "{}      "},
		{"block comment", `{/* x */"a": 1}`, `{       "a": 1}`},
		{"block comment keeps newlines", "{/* a\nb */\"a\": 1}", "{    \n    \"a\": 1}"},
		{"block comment with stars", `{/** x **/"a":1}`, `{         "a":1}`},
		{"trailing comma object", `{"a": 1,}`, `{"a": 1 }`},
		{"trailing comma array", `[1, 2,]`, `[1, 2 ]`},
		{"trailing comma before comment", "{\"a\": 1, // c\n}", "{\"a\": 1      \n}"},
		{"trailing comma after string", `{"a": "x",}`, `{"a": "x" }`},
		{"trailing comma after object", `{"a": {"b": 1,},}`, `{"a": {"b": 1 } }`},
		{"trailing comma after literal", `[true,]`, `[true ]`},
		{"url in string", `{"u": "http://x/*y*/"}`, `{"u": "http://x/*y*/"}`},
		{"escaped quote in string", `{"a": "\"//", "b": 1,}`, `{"a": "\"//", "b": 1 }`},
		{"escaped backslash", `{"a": "\\"}// c`, `{"a": "\\"}    `},
		{"comma in string", `{"a": ",}"}`, `{"a": ",}"}`},
		{"leading comma kept", `{,}`, `{,}`},
		{"double comma kept", `[1,,]`, `[1,,]`},
		{"comma after colon kept", `{"a":,}`, `{"a":,}`},
		{"comma after open bracket kept", `[,]`, `[,]`},
		{"lone slash kept", `{"a": 1 / 2}`, `{"a": 1 / 2}`},
		{"bom", "\xEF\xBB\xBF{}", "   {}"},
		{"utf8 in comment", "{} // héllo", "{}" + strings.Repeat(" ", len(" // héllo"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StripJSONC([]byte(tc.in))
			if err != nil {
				t.Fatalf("StripJSONC(%q): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Errorf("StripJSONC(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			if len(got) != len(tc.in) {
				t.Errorf("length changed: %d -> %d", len(tc.in), len(got))
			}
		})
	}
}

func TestStripJSONCUnterminatedBlock(t *testing.T) {
	in := "{\n  /* never closed\n}"
	_, err := StripJSONC([]byte(in))
	var ce *CommentError
	if !errors.As(err, &ce) || ce.Offset != 4 {
		t.Fatalf("err = %v, want CommentError at offset 4", err)
	}
	err = Decode([]byte(in), new(any))
	var pe *PosError
	if !errors.As(err, &pe) || pe.Line != 2 || pe.Col != 3 {
		t.Fatalf("Decode err = %#v, want 2:3", err)
	}
	if !strings.Contains(err.Error(), "2:3: unterminated /* comment") {
		t.Errorf("message %q", err)
	}
}

func TestStripJSONCDoesNotAlterInput(t *testing.T) {
	in := []byte(`{"a": 1, // c
}`)
	orig := append([]byte(nil), in...)
	if _, err := StripJSONC(in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, orig) {
		t.Fatal("input modified")
	}
}

func TestDecodeShippedFile(t *testing.T) {
	data, err := os.ReadFile("testdata/urom_rdmo_params.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		General map[string]int    `json:"doca_general_flags"`
		Program map[string]string `json:"doca_program_flags"`
	}
	if err := Decode(data, &v); err != nil {
		t.Fatal(err)
	}
	if v.General["log-level"] != 60 || v.General["sdk-log-level"] != 40 {
		t.Errorf("general = %v", v.General)
	}
	if v.Program["device"] != "mlx5_0" || v.Program["mode"] != "server" || v.Program["server-name"] != "bf2-host-01" {
		t.Errorf("program = %v", v.Program)
	}
	// encoding/json itself rejects the file as shipped.
	if json.Valid(data) {
		t.Error("testdata should not be plain JSON (comments, trailing commas)")
	}
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{}`, `[]`, `null`, `0`, `"s"`, `{"a": [1, 2.5, "x", true, null, {"b": {}}]}`,
		`{"u": "http://example.com/a//b", "c": "/* not a comment */"}`,
		`  {"a": "\u00e9\n\"//"}  `,
	} {
		var got, want any
		if err := Decode([]byte(in), &got); err != nil {
			t.Fatalf("Decode(%q): %v", in, err)
		}
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Decode(%q) = %#v, want %#v", in, got, want)
		}
	}
}

func TestDecodeErrorPositions(t *testing.T) {
	tests := []struct {
		in        string
		line, col int
		msg       string
	}{
		{"{\n  \"a\": x\n}", 2, 8, "invalid character 'x'"},
		{"{\n  // comment\n  \"a\": 1\n  \"b\": 2\n}", 4, 3, "invalid character '\"' after object key:value pair"},
		{"{\"a\": 1", 1, 8, "unexpected end of file"},
		{"{\"é\": 1,,}", 1, 9, "invalid character ','"},
		{"{\n\t\"a\": [1,,2]\n}", 2, 10, "invalid character ','"},
	}
	for _, tc := range tests {
		err := Decode([]byte(tc.in), new(any))
		var pe *PosError
		if !errors.As(err, &pe) {
			t.Errorf("Decode(%q) = %v, want PosError", tc.in, err)
			continue
		}
		if pe.Line != tc.line || pe.Col != tc.col || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Decode(%q) = %d:%d %q, want %d:%d %q", tc.in, pe.Line, pe.Col, err, tc.line, tc.col, tc.msg)
		}
	}
}

func TestLineCol(t *testing.T) {
	data := []byte("ab\ncé\n\nx")
	for _, tc := range []struct{ off, line, col int }{
		{0, 1, 1}, {2, 1, 3}, {3, 2, 1}, {4, 2, 2}, {6, 2, 3}, {7, 3, 1}, {8, 4, 1}, {9, 4, 2}, {100, 4, 2}, {-1, 1, 1},
	} {
		l, c := lineCol(data, tc.off)
		if l != tc.line || c != tc.col {
			t.Errorf("lineCol(%d) = %d:%d, want %d:%d", tc.off, l, c, tc.line, tc.col)
		}
	}
}

// FuzzParams checks the comment/trailing-comma stripper, Decode and
// ParseParams: they never panic, the stripper preserves length and
// newlines, and on valid JSON the stripper is the identity and Decode gives
// exactly what encoding/json gives.
func FuzzParams(f *testing.F) {
	if data, err := os.ReadFile("testdata/urom_rdmo_params.json"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		`{"mode": "client", "log-level": 50}`,
		`{"u": "http://x//y", /* c */ "a": [1, 2,],}`,
		`{"a": "\"//\\", "b": {"c": null}}`,
		"{\n// c\n\"doca_program_flags\": {\"device\": \"mlx5_0\",},\n}",
		`[1,,]`, `{,}`, `/*`, `"\`, `{"a":1}/`, "\xEF\xBB\xBF{}", `{"plugin-path": ["/a", "/b",]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		clean, err := StripJSONC(data)
		if err == nil {
			if len(clean) != len(data) {
				t.Fatalf("length %d -> %d", len(data), len(clean))
			}
			if bytes.Count(clean, []byte("\n")) != bytes.Count(data, []byte("\n")) {
				t.Fatal("newlines not preserved")
			}
		}
		var got any
		derr := Decode(data, &got)
		if json.Valid(data) {
			if err != nil || !bytes.Equal(clean, data) {
				t.Fatalf("valid JSON altered: %q -> %q (%v)", data, clean, err)
			}
			var want any
			if werr := json.Unmarshal(data, &want); werr != nil {
				// Valid syntax that encoding/json still refuses (1e1000
				// overflows float64): Decode must refuse it too.
				if derr == nil {
					t.Fatalf("Decode(%q) succeeded, encoding/json: %v", data, werr)
				}
			} else if derr != nil {
				t.Fatalf("Decode(valid %q): %v", data, derr)
			} else if !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode(%q) = %#v, encoding/json = %#v", data, got, want)
			}
		}
		if derr != nil {
			var pe *PosError
			if !errors.As(derr, &pe) {
				t.Fatalf("Decode error %T %v is not a PosError", derr, derr)
			}
		}
		pf, perr := ParseParams("fuzz.json", data)
		if perr == nil && pf == nil {
			t.Fatal("nil ParamsFile without error")
		}
		if perr != nil && perr.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}
