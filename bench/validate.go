package bench

import (
	"bytes"
	_ "embed" // results.schema.json
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is the JSON Schema (draft 2020-12) of results.json; see
// docs/bench-schema.md for what each field means.
//
//go:embed results.schema.json
var Schema []byte

// schemaURL is the schema's $id.
const schemaURL = "https://github.com/shoalml/shoal/bench/results.schema.json"

// compiledSchema compiles Schema once; the result is immutable and safe for
// concurrent use.
var compiledSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema))
	if err != nil {
		return nil, fmt.Errorf("bench: embedded schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("bench: embedded schema: %w", err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("bench: embedded schema does not compile: %w", err)
	}
	return s, nil
})

// Problem is one thing wrong in a results.json document.
type Problem struct {
	// Run is the index in "runs" of the record at fault, or -1 when the
	// problem is in the document's own fields.
	Run int
	// ID is that record's "id", when it has a string one.
	ID string
	// Field is the JSON path of the offending value, relative to the
	// record (or the document when Run is -1), e.g. "step_time.p50.mean";
	// empty for the record or document itself.
	Field string
	// Message says what is wrong and what was expected.
	Message string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Run >= 0 {
		fmt.Fprintf(&b, "runs[%d]", p.Run)
		if p.ID != "" {
			fmt.Fprintf(&b, " (id %q)", p.ID)
		}
	} else {
		b.WriteString("document")
	}
	if p.Field != "" {
		fmt.Fprintf(&b, ": %s", p.Field)
	}
	fmt.Fprintf(&b, ": %s", p.Message)
	return b.String()
}

// ValidationError is returned by Validate when a document does not follow
// the schema; it lists every problem found.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return "results.json does not follow " + SchemaVersion + ": " + e.Problems[0].String()
	}
	lines := make([]string, 0, len(e.Problems)+1)
	lines = append(lines, fmt.Sprintf("results.json does not follow %s (%d problems):", SchemaVersion, len(e.Problems)))
	for _, p := range e.Problems {
		lines = append(lines, "  "+p.String())
	}
	return strings.Join(lines, "\n")
}

// Validate checks a results.json document against Schema, and that the
// records' ids are unique. A document that is not JSON gets a plain error;
// one that does not follow the schema gets a *ValidationError naming each
// record (index and id) and field at fault.
func Validate(data []byte) error {
	sch, err := compiledSchema()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("results.json is not JSON: %w", err)
	}
	var problems []Problem
	if err := sch.Validate(inst); err != nil {
		verr, ok := err.(*jsonschema.ValidationError)
		if !ok {
			return fmt.Errorf("validating results.json: %w", err)
		}
		problems = collectProblems(verr, inst)
	}
	problems = append(problems, duplicateIDs(inst)...)
	if len(problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: problems}
}

// Load reads, validates and decodes a results.json file. Fields it does not
// know are ignored, so files written by newer versions with new optional
// fields load.
func Load(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := Validate(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var r Results
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: decoding: %w", path, err)
	}
	return &r, nil
}

var printer = message.NewPrinter(language.English)

// collectProblems flattens the validator's error tree into one Problem per
// failed assertion. Failures under anyOf/oneOf are merged into one problem
// at the anyOf, since only together do they say what was wanted, and a
// bad property name is reported at its object.
func collectProblems(root *jsonschema.ValidationError, inst any) []Problem {
	var out []Problem
	var walk func(e *jsonschema.ValidationError, parent []string)
	walk = func(e *jsonschema.ValidationError, parent []string) {
		switch k := e.ErrorKind.(type) {
		case *kind.AnyOf, *kind.OneOf:
			var wants []string
			for _, l := range leaves(e) {
				wants = append(wants, l.ErrorKind.LocalizedString(printer))
			}
			out = append(out, newProblem(inst, e.InstanceLocation, "", "want one of: "+strings.Join(wants, "; or ")))
			return
		case *kind.PropertyNames:
			// The causes are located at the name, not in the document.
			msgs := []string{e.ErrorKind.LocalizedString(printer)}
			for _, l := range leaves(e) {
				if l != e {
					msgs = append(msgs, l.ErrorKind.LocalizedString(printer))
				}
			}
			// jsonschema v6.0.3 gives this error its validator's location
			// slice, which later validation overwrites (only its length
			// is right), so find the object under the parent's location.
			loc := findObjectWithKey(inst, parent, len(e.InstanceLocation), k.Property)
			out = append(out, newProblem(inst, loc, "", strings.Join(msgs, ": ")))
			return
		case *kind.Required:
			for _, m := range k.Missing {
				out = append(out, newProblem(inst, e.InstanceLocation, m, "missing (required)"))
			}
			return
		}
		if len(e.Causes) == 0 {
			out = append(out, newProblem(inst, e.InstanceLocation, "", e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c, e.InstanceLocation)
		}
	}
	walk(root, nil)
	// The validator reports in map order; sort for stable messages.
	slices.SortStableFunc(out, func(a, b Problem) int {
		if a.Run != b.Run {
			return a.Run - b.Run
		}
		return strings.Compare(a.Field, b.Field)
	})
	return slices.Compact(out)
}

// findObjectWithKey returns the location of the first object at depth
// under prefix (a location of that many tokens) that has the key, or
// prefix when there is none.
func findObjectWithKey(inst any, prefix []string, depth int, key string) []string {
	node := inst
	for _, tok := range prefix {
		node = child(node, tok)
	}
	var find func(v any, loc []string) []string
	find = func(v any, loc []string) []string {
		if len(loc) == depth {
			if obj, ok := v.(map[string]any); ok {
				if _, has := obj[key]; has {
					return loc
				}
			}
			return nil
		}
		switch v := v.(type) {
		case map[string]any:
			keys := slices.Sorted(maps.Keys(v))
			for _, k := range keys {
				if got := find(v[k], append(slices.Clip(loc), k)); got != nil {
					return got
				}
			}
		case []any:
			for i, e := range v {
				if got := find(e, append(slices.Clip(loc), strconv.Itoa(i))); got != nil {
					return got
				}
			}
		}
		return nil
	}
	if loc := find(node, slices.Clone(prefix)); loc != nil {
		return loc
	}
	return prefix
}

func child(v any, tok string) any {
	switch v := v.(type) {
	case map[string]any:
		return v[tok]
	case []any:
		if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(v) {
			return v[i]
		}
	}
	return nil
}

func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// newProblem locates loc (a JSON pointer's tokens) in the document: a path
// under "runs/<i>" belongs to record i. child, when set, is appended to the
// field path (a missing property).
func newProblem(inst any, loc []string, child, msg string) Problem {
	p := Problem{Run: -1, Message: msg}
	if len(loc) >= 2 && loc[0] == "runs" {
		if i, err := strconv.Atoi(loc[1]); err == nil {
			p.Run = i
			p.ID = recordID(inst, i)
			loc = loc[2:]
		}
	}
	field := fieldPath(loc)
	if child != "" {
		if field != "" {
			field += "."
		}
		field += child
	}
	p.Field = field
	return p
}

// fieldPath writes pointer tokens as a.b[3].c.
func fieldPath(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil {
			fmt.Fprintf(&b, "[%s]", t)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}

func runsOf(inst any) []any {
	doc, ok := inst.(map[string]any)
	if !ok {
		return nil
	}
	runs, _ := doc["runs"].([]any)
	return runs
}

func recordID(inst any, i int) string {
	runs := runsOf(inst)
	if i < 0 || i >= len(runs) {
		return ""
	}
	rec, ok := runs[i].(map[string]any)
	if !ok {
		return ""
	}
	id, _ := rec["id"].(string)
	return id
}

// duplicateIDs reports records whose id an earlier record already has:
// Diff matches records by id, so ids must be unique within a file.
func duplicateIDs(inst any) []Problem {
	var out []Problem
	first := make(map[string]int)
	for i := range runsOf(inst) {
		id := recordID(inst, i)
		if id == "" {
			continue
		}
		if j, ok := first[id]; ok {
			out = append(out, Problem{Run: i, ID: id, Field: "id", Message: fmt.Sprintf("duplicate: runs[%d] has the same id; ids must be unique", j)})
			continue
		}
		first[id] = i
	}
	return out
}
