package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// The params files NVIDIA ships with DOCA applications are "JSON with
// comments": `//` line comments, `/* */` block comments and a trailing comma
// after the last member of an object. encoding/json accepts none of these, so
// StripJSONC blanks them out first.
//
// The stripper is length preserving: every removed byte becomes a space, and
// newlines inside comments are kept. A byte offset in the stripped text is
// therefore the same offset in the file the user wrote, and encoding/json's
// error offsets translate directly into the user's line:column.

// utf8BOM is the byte order mark some editors put at the start of a file.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// CommentError reports a comment that cannot be stripped (an unterminated
// block comment). Offset is the byte offset of the comment's start.
type CommentError struct {
	Offset int64
	Msg    string
}

func (e *CommentError) Error() string { return e.Msg }

// StripJSONC returns a copy of data in which comments (`//` to end of line,
// `/* ... */`), a leading UTF-8 byte order mark and trailing commas (a comma
// after a value, followed only by whitespace or comments and then `}` or `]`)
// are replaced by spaces. Newlines are kept, and nothing inside a string
// literal is touched, so "http://host" survives. The result has the same
// length as data. Input that is valid JSON comes back unchanged.
//
// Only a single comma directly after a value is treated as trailing: `{,}`,
// `[1,,]` and `{"a":,}` are left alone for the JSON decoder to reject.
func StripJSONC(data []byte) ([]byte, error) {
	out := make([]byte, len(data))
	copy(out, data)
	i := 0
	if len(out) >= len(utf8BOM) && string(out[:len(utf8BOM)]) == string(utf8BOM) {
		for ; i < len(utf8BOM); i++ {
			out[i] = ' '
		}
	}
	pendingComma := -1 // index of a comma that is trailing if `}` or `]` comes next
	var last byte      // last significant byte outside strings and comments; 0 at start
	for i < len(out) {
		c := out[i]
		switch {
		case c == '"':
			// Skip the string literal; an unterminated one is left for the
			// decoder to report.
			pendingComma = -1
			i++
			for i < len(out) {
				if out[i] == '\\' {
					i += 2
					continue
				}
				if out[i] == '"' {
					break
				}
				i++
			}
			i++
			last = '"'
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for i < len(out) && out[i] != '\n' {
				out[i] = ' '
				i++
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			start := i
			end := -1
			for j := i + 2; j+1 < len(out); j++ {
				if out[j] == '*' && out[j+1] == '/' {
					end = j + 2
					break
				}
			}
			if end < 0 {
				return nil, &CommentError{Offset: int64(start), Msg: "unterminated /* comment"}
			}
			for ; i < end; i++ {
				if out[i] != '\n' {
					out[i] = ' '
				}
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == ',':
			switch last {
			case 0, '{', '[', ',', ':':
				pendingComma = -1
			default:
				pendingComma = i
			}
			last = c
			i++
		case c == '}' || c == ']':
			if pendingComma >= 0 {
				out[pendingComma] = ' '
			}
			pendingComma = -1
			last = c
			i++
		default:
			pendingComma = -1
			last = c
			i++
		}
	}
	return out, nil
}

// Decode strips comments and trailing commas from data (see StripJSONC) and
// decodes the result into v with encoding/json. For input that is already
// valid JSON it behaves exactly like json.Unmarshal. Syntax errors are
// returned as *PosError with the line and column in data.
func Decode(data []byte, v any) error {
	clean, err := StripJSONC(data)
	if err != nil {
		return positionError("", data, err)
	}
	if err := json.Unmarshal(clean, v); err != nil {
		return positionError("", data, err)
	}
	return nil
}

// PosError is an error at a place in a params file. Line and Col are
// 1-based (Col counts characters, not bytes); they are 0 when the error is
// not tied to a place. Key is the params key involved, if any.
type PosError struct {
	File string
	Line int
	Col  int
	Key  string
	Err  error
}

func (e *PosError) Error() string {
	prefix := e.File
	if e.Line > 0 {
		if prefix != "" {
			prefix += ":"
		}
		prefix += fmt.Sprintf("%d:%d", e.Line, e.Col)
	}
	msg := e.Err.Error()
	if e.Key != "" {
		msg = fmt.Sprintf("key %q: %s", e.Key, msg)
	}
	if prefix == "" {
		return msg
	}
	return prefix + ": " + msg
}

func (e *PosError) Unwrap() error { return e.Err }

// lineCol converts a byte offset in data to a 1-based line and column. The
// column counts runes, so a tab or a multi-byte character is one column.
func lineCol(data []byte, off int) (line, col int) {
	if off < 0 {
		off = 0
	}
	if off > len(data) {
		off = len(data)
	}
	line, lineStart := 1, 0
	for i := 0; i < off; i++ {
		if data[i] == '\n' {
			line++
			lineStart = i + 1
		}
	}
	return line, utf8.RuneCount(data[lineStart:off]) + 1
}

// positionError turns an error from StripJSONC or encoding/json into a
// *PosError that points at the offending place in data.
func positionError(file string, data []byte, err error) error {
	var (
		cerr *CommentError
		serr *json.SyntaxError
		terr *json.UnmarshalTypeError
		off  = -1
		msg  = err
	)
	switch {
	case errors.As(err, &cerr):
		off = int(cerr.Offset)
	case errors.As(err, &serr):
		// Offset counts the bytes read, including the offending one.
		off = int(serr.Offset) - 1
		if serr.Offset >= int64(len(data)) && isEOFMsg(serr.Error()) {
			off = len(data)
			msg = errors.New("unexpected end of file")
		}
	case errors.As(err, &terr):
		off = int(terr.Offset) - 1
	case errors.Is(err, io.ErrUnexpectedEOF):
		off = len(data)
		msg = errors.New("unexpected end of file")
	}
	if off < 0 {
		return &PosError{File: file, Err: msg}
	}
	line, col := lineCol(data, off)
	return &PosError{File: file, Line: line, Col: col, Err: msg}
}

func isEOFMsg(s string) bool { return s == "unexpected end of JSON input" }
