package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// DOCA params files group their keys under these two objects; rdmo also
// accepts the keys at the top level ("flat" files).
const (
	GroupGeneral = "doca_general_flags"
	GroupProgram = "doca_program_flags"
)

// KeyAliases maps params-file keys to the flag they set, where the key is not
// the flag's long name.
var KeyAliases = map[string]string{
	"urom-address": "urom",
}

// notFromFile lists flags a params file cannot set.
var notFromFile = map[string]bool{
	"help":    true,
	"version": true,
	"json":    true,
	"config":  true,
}

// Param is one key of a params file.
type Param struct {
	Key   string   // the key as written
	Group string   // the enclosing group (GroupGeneral, GroupProgram) or "" at top level
	Value string   // the value as it would be spelled on the command line (scalars)
	List  []string // the elements, when the value is a JSON array
	Kind  string   // "string", "number", "bool" or "list"
	Line  int      // 1-based position of the key
	Col   int
}

// IsList reports whether the value was a JSON array.
func (p Param) IsList() bool { return p.Kind == "list" }

// ParamsFile is a parsed params file: its keys in file order.
type ParamsFile struct {
	Path   string
	Params []Param
}

// Get returns the param with the given key (or alias), if present.
func (pf *ParamsFile) Get(key string) (Param, bool) {
	for _, p := range pf.Params {
		if p.Key == key || KeyAliases[p.Key] == key {
			return p, true
		}
	}
	return Param{}, false
}

// ReadParamsFile reads and parses the params file at path; see ParseParams.
func ReadParamsFile(path string) (*ParamsFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var perr *os.PathError
		if errors.As(err, &perr) {
			err = perr.Err
		}
		return nil, fmt.Errorf("params file %s: %w", path, err)
	}
	return ParseParams(path, data)
}

// ParseParams parses a params file as DOCA ships them:
//
//	{
//	    "doca_general_flags": {
//	        // -l - Set the (numeric) log level for the program
//	        "log-level": 60,
//	    },
//	    "doca_program_flags": {
//	        "device": "mlx5_0",
//	        "mode": "server",
//	    }
//	}
//
// Comments and trailing commas are allowed (see StripJSONC). Keys may also be
// given at the top level. A third group, GroupWorker ("worker"), holds the
// worker limits of `rdmo dpu --config`: its key K sets the flag --worker-K. Values must be strings, numbers, booleans or arrays
// of those; a key may appear only once in the file. name is used in error
// messages, which carry the line and column.
func ParseParams(name string, data []byte) (*ParamsFile, error) {
	clean, err := StripJSONC(data)
	if err != nil {
		return nil, positionError(name, data, err)
	}
	if len(bytes.TrimSpace(clean)) == 0 {
		return nil, &PosError{File: name, Err: errors.New("empty params file: want a JSON object")}
	}
	// Check the syntax of the whole file first: encoding/json's scanner
	// reports consistent offsets (the token API's are sometimes one less).
	if err := json.Unmarshal(clean, new(json.RawMessage)); err != nil {
		return nil, positionError(name, data, err)
	}
	p := &paramParser{name: name, data: data, clean: clean, seen: map[string]Param{}}
	p.dec = json.NewDecoder(bytes.NewReader(clean))
	p.dec.UseNumber()
	pf := &ParamsFile{Path: name}
	if err := p.parse(pf); err != nil {
		return nil, err
	}
	return pf, nil
}

type paramParser struct {
	name  string
	data  []byte // as written, for positions
	clean []byte // stripped
	dec   *json.Decoder
	seen  map[string]Param
}

func (p *paramParser) errAt(off int, key string, format string, args ...any) error {
	line, col := lineCol(p.data, off)
	return &PosError{File: p.name, Line: line, Col: col, Key: key, Err: fmt.Errorf(format, args...)}
}

// next skips whitespace and the given separators and returns the offset of
// the next significant byte.
func (p *paramParser) next(seps string) int {
	i := int(p.dec.InputOffset())
	for i < len(p.clean) {
		c := p.clean[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || strings.IndexByte(seps, c) >= 0 {
			i++
			continue
		}
		break
	}
	return i
}

func (p *paramParser) token() (json.Token, error) {
	tok, err := p.dec.Token()
	if err == io.EOF {
		return nil, p.errAt(len(p.data), "", "unexpected end of file")
	}
	if err != nil {
		return nil, positionError(p.name, p.data, err)
	}
	return tok, nil
}

func (p *paramParser) parse(pf *ParamsFile) error {
	start := p.next("")
	tok, err := p.token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return p.errAt(start, "", "a params file must be a JSON object")
	}
	if err := p.object(pf, "", true); err != nil {
		return err
	}
	end := p.next("")
	if _, err := p.dec.Token(); err != io.EOF || end < len(p.clean) {
		return p.errAt(end, "", "unexpected data after the top-level object")
	}
	return nil
}

// object reads the members of an object whose '{' has been consumed.
func (p *paramParser) object(pf *ParamsFile, group string, top bool) error {
	for p.dec.More() {
		keyOff := p.next(",")
		tok, err := p.token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return p.errAt(keyOff, "", "expected a key")
		}
		valOff := p.next(":")
		tok, err = p.token()
		if err != nil {
			return err
		}
		line, col := lineCol(p.data, keyOff)
		param := Param{Key: key, Group: group, Line: line, Col: col}
		seenKey := key
		if group == GroupWorker {
			seenKey = GroupWorker + "." + key // its keys are apart from the others
		}
		switch v := tok.(type) {
		case json.Delim:
			switch {
			case v == '{' && top:
				if key != GroupGeneral && key != GroupProgram && key != GroupWorker {
					return p.errAt(keyOff, "", "unknown group %q%s; the groups are %q and %q, and %q in rdmo dpu --config; keys may also be given at the top level",
						key, didYouMean(key, []string{GroupGeneral, GroupProgram, GroupWorker}), GroupGeneral, GroupProgram, GroupWorker)
				}
				if prev, dup := p.seen["\x00group:"+key]; dup {
					return p.errAt(keyOff, "", "group %q appears twice (first at %d:%d)", key, prev.Line, prev.Col)
				}
				p.seen["\x00group:"+key] = param
				if err := p.object(pf, key, false); err != nil {
					return err
				}
				continue
			case v == '{':
				return p.errAt(valOff, key, "nested objects are not allowed; want a string, number or boolean")
			case v == '[':
				list, err := p.list(key)
				if err != nil {
					return err
				}
				param.Kind, param.List = "list", list
			}
		case string:
			param.Kind, param.Value = "string", v
		case json.Number:
			param.Kind, param.Value = "number", v.String()
		case bool:
			param.Kind, param.Value = "bool", fmt.Sprint(v)
		case nil:
			return p.errAt(valOff, key, "null is not a value; remove the key to keep the default")
		}
		if prev, dup := p.seen[seenKey]; dup {
			return p.errAt(keyOff, key, "given twice (first at %d:%d)", prev.Line, prev.Col)
		}
		p.seen[seenKey] = param
		pf.Params = append(pf.Params, param)
	}
	_, err := p.token() // the closing '}'
	return err
}

// list reads the elements of an array whose '[' has been consumed.
func (p *paramParser) list(key string) ([]string, error) {
	list := []string{}
	for p.dec.More() {
		off := p.next(",")
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		switch v := tok.(type) {
		case string:
			list = append(list, v)
		case json.Number:
			list = append(list, v.String())
		case bool:
			list = append(list, fmt.Sprint(v))
		default:
			return nil, p.errAt(off, key, "list elements must be strings, numbers or booleans")
		}
	}
	_, err := p.token() // the closing ']'
	return list, err
}

// Apply sets the flags of fs from the params file. A flag the user already
// set on the command line (pflag's Changed) is left alone: the command line
// overrides the file, and the file overrides the defaults. Keys name flags
// by their long name (or an alias in KeyAliases); a key that names no flag
// of fs, or a flag that cannot come from a file (help, version, json,
// config), is an error naming the key, the file and its line:column.
func (pf *ParamsFile) Apply(fs *pflag.FlagSet) error {
	set := map[string]Param{}
	for _, p := range pf.Params {
		name := p.Key
		if p.Group == GroupWorker {
			name = WorkerFlagPrefix + p.Key
			if f := fs.Lookup(name); f == nil || f.Hidden {
				keys := workerFileKeys(fs)
				if len(keys) == 0 {
					return &PosError{File: pf.Path, Line: p.Line, Col: p.Col,
						Err: fmt.Errorf("key %q of group %q: worker limits are set in the rdmo dpu --config file, not here", p.Key, GroupWorker)}
				}
				return &PosError{File: pf.Path, Line: p.Line, Col: p.Col,
					Err: fmt.Errorf("unknown key %q in group %q%s; valid keys there: %s", p.Key, GroupWorker, didYouMean(p.Key, keys), strings.Join(keys, ", "))}
			}
		} else if alias, ok := KeyAliases[name]; ok && fs.Lookup(alias) != nil {
			name = alias
		}
		f := fs.Lookup(name)
		if f == nil || notFromFile[name] || f.Hidden {
			keys := FileKeys(fs)
			return &PosError{File: pf.Path, Line: p.Line, Col: p.Col,
				Err: fmt.Errorf("unknown key %q%s; valid keys: %s", p.Key, keyHint(p.Key, keys, fs), strings.Join(keys, ", "))}
		}
		if prev, dup := set[name]; dup {
			return &PosError{File: pf.Path, Line: p.Line, Col: p.Col, Key: p.Key,
				Err: fmt.Errorf("sets --%s, already set by %q at %d:%d", name, prev.Key, prev.Line, prev.Col)}
		}
		set[name] = p
		if f.Changed {
			continue // the command line wins
		}
		if err := setFlag(fs, f, p); err != nil {
			key := p.Key
			if p.Group == GroupWorker {
				key = GroupWorker + "." + p.Key
			}
			return &PosError{File: pf.Path, Line: p.Line, Col: p.Col, Key: key, Err: err}
		}
	}
	return nil
}

func setFlag(fs *pflag.FlagSet, f *pflag.Flag, p Param) error {
	sv, isSlice := f.Value.(pflag.SliceValue)
	if p.IsList() {
		if !isSlice {
			return errors.New("takes a single value, not a list")
		}
		if err := sv.Replace(p.List); err != nil {
			return err
		}
		f.Changed = true
		return nil
	}
	if f.Value.Type() == "bool" && p.Kind != "bool" {
		return fmt.Errorf("want true or false, not %s", p.Value)
	}
	if err := fs.Set(f.Name, p.Value); err != nil {
		var ive *pflag.InvalidValueError
		if errors.As(err, &ive) && ive.Unwrap() != nil {
			return ive.Unwrap()
		}
		return err
	}
	return nil
}

// keyHint suggests the key an unknown key most likely meant: the closest
// of keys, or a worker limit written without its group ("max-batch" at the
// top level is "worker-max-batch", or "max-batch" in the "worker" group).
func keyHint(key string, keys []string, fs *pflag.FlagSet) string {
	if h := didYouMean(key, keys); h != "" {
		return h
	}
	if f := fs.Lookup(WorkerFlagPrefix + key); f != nil && !f.Hidden {
		return fmt.Sprintf(" (did you mean %q in group %q, or %q?)", key, GroupWorker, WorkerFlagPrefix+key)
	}
	return ""
}

// FileKeys lists the keys a params file may use with fs, sorted.
func FileKeys(fs *pflag.FlagSet) []string {
	var keys []string
	fs.VisitAll(func(f *pflag.Flag) {
		if notFromFile[f.Name] || f.Hidden {
			return
		}
		keys = append(keys, f.Name)
	})
	for alias, name := range KeyAliases {
		if f := fs.Lookup(name); f != nil && !f.Hidden {
			keys = append(keys, alias)
		}
	}
	sort.Strings(keys)
	return keys
}

// ApplyParamsFile reads the params file at path and applies it to fs; see
// ParamsFile.Apply.
func ApplyParamsFile(fs *pflag.FlagSet, path string) error {
	pf, err := ReadParamsFile(path)
	if err != nil {
		return err
	}
	return pf.Apply(fs)
}

// LoadParams applies the params file named by the value of the flag
// fileFlag ("json" for -j/--json, "config" for `rdmo dpu --config`) to fs,
// after the command line has been parsed into fs. It does nothing when the
// flag is absent or empty. Errors are usage errors.
func LoadParams(fs *pflag.FlagSet, fileFlag string) error {
	f := fs.Lookup(fileFlag)
	if f == nil || !f.Changed {
		return nil
	}
	path := f.Value.String()
	if path == "" {
		return Usagef("%s: empty file name", FlagName(f))
	}
	return UsageError(ApplyParamsFile(fs, path))
}
