package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// fill sets every field of v to a value that is not its zero value, so a
// field the compact form does not carry shows up as a difference.
func fill(t *testing.T, v reflect.Value, seed int) {
	t.Helper()
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(time.Date(2026, 11, 26, 13, 0, seed, 123456789, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d-%s", seed, v.Type().Name()))
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(1000 + seed))
	case reflect.Float64:
		v.SetFloat(float64(seed) + 0.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(t, s.Index(i), seed+i)
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), seed)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Name != "Children" { // the tree's shape is set by hand
				fill(t, v.Field(i), seed+i)
			}
		}
	default:
		t.Fatalf("fill: no value for a %s (%s): teach fill and the compact tree form about it", v.Kind(), v.Type())
	}
}

func roundTrip(t *testing.T, trees []*kin.TreeNode) []*kin.TreeNode {
	t.Helper()
	data := httpapi.EncodeTreeColumns(trees).AppendJSON(nil)
	got, err := httpapi.DecodeTree(httpapi.TreeColumnsType, bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, data)
	}
	return got
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTreeColumnsCarryEveryField: every field of kin.Agent and
// kin.TreeNode, set to a value that is not zero, comes back from the
// compact form as the nested JSON would carry it. It fails when a field is
// added to kin.Agent and not to the compact form.
func TestTreeColumnsCarryEveryField(t *testing.T) {
	var full kin.TreeNode
	fill(t, reflect.ValueOf(&full).Elem(), 1)
	full.Children = []*kin.TreeNode{}
	var other kin.TreeNode
	fill(t, reflect.ValueOf(&other).Elem(), 40)
	other.Children = []*kin.TreeNode{}
	root := &kin.TreeNode{Agent: kin.Agent{ID: 1, Name: "root", Status: kin.StatusActive}, Children: []*kin.TreeNode{&full, &other}}
	bare := &kin.TreeNode{Agent: kin.Agent{ID: 2}, Children: []*kin.TreeNode{}}
	trees := []*kin.TreeNode{root, bare}
	got := roundTrip(t, trees)
	if want, have := mustJSON(t, trees), mustJSON(t, got); want != have {
		t.Fatalf("the compact form changed the tree:\nwant %s\ngot  %s", want, have)
	}
	// The hand-written JSON is JSON that encoding/json reads the same way.
	full.Name = "quote\" back\\slash \n\t\x01 \u2028 é \xff"
	data := httpapi.EncodeTreeColumns(trees).AppendJSON(nil)
	var viaStd httpapi.TreeColumns
	if err := json.Unmarshal(data, &viaStd); err != nil {
		t.Fatalf("encoding/json cannot read the compact form: %v\n%s", err, data)
	}
	fromStd, err := viaStd.Trees()
	if err != nil {
		t.Fatal(err)
	}
	ours, err := httpapi.DecodeTree(httpapi.TreeColumnsType, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if want, have := mustJSON(t, fromStd), mustJSON(t, ours); want != have {
		t.Fatalf("encoding/json and the compact reader differ:\n%s\n%s", want, have)
	}
	if got := ours[0].Children[0].Name; got != "quote\" back\\slash \n\t\x01 \u2028 é \ufffd" {
		t.Fatalf("the name came back as %q", ours[0].Children[0].Name)
	}
}

// TestTreeColumnsShape: the order of children, nesting several levels deep,
// several roots and an empty forest survive; a repeated string is sent once.
func TestTreeColumnsShape(t *testing.T) {
	node := func(id kin.AgentID, children ...*kin.TreeNode) *kin.TreeNode {
		return &kin.TreeNode{Agent: kin.Agent{ID: id, Name: fmt.Sprintf("a%d", id), Responsible: "Dr. Schmidt",
			Status: kin.StatusActive, CreatedAt: time.Unix(1764150000, int64(id)).UTC()}, Children: append([]*kin.TreeNode{}, children...)}
	}
	forest := []*kin.TreeNode{
		node(5, node(9, node(7), node(3, node(11))), node(2)),
		node(1),
		node(4, node(6)),
	}
	for _, trees := range [][]*kin.TreeNode{forest, {}} {
		got := roundTrip(t, trees)
		if want, have := mustJSON(t, trees), mustJSON(t, got); want != have {
			t.Fatalf("want %s\ngot  %s", want, have)
		}
	}
	tc := httpapi.EncodeTreeColumns(forest)
	if n := strings.Count(strings.Join(tc.Strings, "\n"), "Dr. Schmidt"); n != 1 {
		t.Errorf("the responsible person is in the string table %d times, want once", n)
	}
	if _, ok := tc.Int["pid"]; ok {
		t.Errorf("a column of zeros (pid) was sent")
	}
}

// TestTreeColumnsMalformed: a compact tree that is not well formed is an
// error naming what is wrong, never a panic or a wrong tree.
func TestTreeColumnsMalformed(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"version", `{"version":2,"n":0,"up":[]}`, "version 2"},
		{"not json", `{"version":1,`, "want a string"},
		{"trailing data", `{"version":1,"n":0,"up":[]} x`, "data after the document"},
		{"fraction", `{"version":1,"n":1.0,"up":[]}`, "not a fraction"},
		{"leading zero", `{"version":01,"n":0,"up":[]}`, "want an integer"},
		{"overflow", `{"version":1,"n":0,"up":[],"int":{"id":[99999999999999999999]}}`, "out of range"},
		{"bad escape", `{"version":1,"n":0,"up":[],"strings":["\x"]}`, "bad string"},
		{"raw control", "{\"version\":1,\"n\":0,\"up\":[],\"strings\":[\"a\tb\"]}", "control character"},
		{"too deep", `{"version":1,"n":0,"up":[],"later":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, "nested too deep"},
		{"wrong type", `{"version":1,"n":0,"up":{}}`, "want '['"},
		{"short up", `{"version":1,"n":2,"up":[-1]}`, "1 parent links for 2 agents"},
		{"negative n", `{"version":1,"n":-1,"up":[]}`, "parent links"},
		{"parent after child", `{"version":1,"n":2,"up":[1,-1]}`, "agent 0's parent is node 1"},
		{"self parent", `{"version":1,"n":1,"up":[0]}`, "agent 0's parent is node 0"},
		{"parent below -1", `{"version":1,"n":1,"up":[-2]}`, "agent 0's parent is node -2"},
		{"short int column", `{"version":1,"n":2,"up":[-1,0],"int":{"id":[1]}}`, `column "id" has 1 values`},
		{"short str column", `{"version":1,"n":1,"up":[-1],"strings":[""],"str":{"name":[]}}`, `column "name" has 0 values`},
		{"string out of range", `{"version":1,"n":1,"up":[-1],"strings":[""],"str":{"name":[1]}}`, `names string 1 of 1`},
		{"negative string", `{"version":1,"n":1,"up":[-1],"strings":[""],"str":{"name":[-1]}}`, `names string -1`},
		{"sparse lengths", `{"version":1,"n":1,"up":[-1],"exit":{"at":[0],"values":[]}}`, `1 indexes and 0 values`},
		{"sparse index", `{"version":1,"n":1,"up":[-1],"spend":{"at":[3],"values":[{}]}}`, `names agent 3 of 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := httpapi.DecodeTree(httpapi.TreeColumnsType, strings.NewReader(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error with %q", got, err, tc.want)
			}
		})
	}
}

// FuzzDecodeTree: no input makes the compact tree's reader panic, and what
// it accepts is a tree it can encode again to the same form.
func FuzzDecodeTree(f *testing.F) {
	f.Add(`{"version":1,"n":3,"up":[-1,0,0],"strings":["","a"],"int":{"id":[1,2,3]},"str":{"name":[1,0,1]}}`)
	f.Add(`{"version":1,"n":1,"up":[-1],"command":{"at":[0],"values":[["x"]]},"exit":{"at":[0],"values":[{"code":1}]}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		trees, err := httpapi.DecodeTree(httpapi.TreeColumnsType, strings.NewReader(doc))
		if err != nil {
			return
		}
		again := roundTrip(t, trees)
		if want, have := mustJSON(t, trees), mustJSON(t, again); want != have {
			t.Fatalf("re-encoding changed the tree:\nwant %s\ngot  %s", want, have)
		}
	})
}

// TestTreeWireForms: a daemon answers GET /v1/agents/{id}/tree and GET
// /v1/tree in the compact form only to a client that asks for it (Accept),
// and in the nested JSON otherwise (clients that predate it); the SDK asks
// for the compact form and gets the same tree as the nested JSON says.
func TestTreeWireForms(t *testing.T) {
	a := startAPI(t)
	ctx := context.Background()
	c, err := client.New(client.Config{Addr: a.d.HTTPAddr(), Token: a.token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	root, err := c.Register(ctx, kin.RegisterRequest{Name: "wire-root", Responsible: "Dr. Schmidt"})
	if err != nil {
		t.Fatal(err)
	}
	parent := root.ID
	for i := range 5 {
		ch, err := c.Register(ctx, kin.RegisterRequest{Name: fmt.Sprintf("wire-%d", i), Parent: parent})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			parent = ch.ID
		}
	}
	for _, path := range []string{"/v1/agents/" + root.ID.String() + "/tree", "/v1/tree"} {
		get := func(accept string) (string, []byte) {
			t.Helper()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			hdr := []string{}
			if accept != "" {
				hdr = []string{"Accept", accept}
			}
			resp := a.request(cctx, "GET", path, "Bearer "+a.token, nil, hdr...)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, body)
			}
			return resp.Header.Get("Content-Type"), body
		}
		ct, plain := get("")
		if ct != "application/json" {
			t.Fatalf("GET %s without Accept: Content-Type %q, want application/json", path, ct)
		}
		var nested []*kin.TreeNode
		if err := json.Unmarshal(plain, &nested); err != nil || len(nested) == 0 {
			t.Fatalf("GET %s: the nested form: %v %s", path, err, plain)
		}
		for _, accept := range []string{"application/json", "application/json, " + httpapi.TreeColumnsType + ";q=0"} {
			if ct, _ := get(accept); ct != "application/json" {
				t.Fatalf("GET %s with Accept %q: Content-Type %q, want application/json", path, accept, ct)
			}
		}
		ct, compact := get("text/html, " + httpapi.TreeColumnsType + ";q=0.9")
		if ct != httpapi.TreeColumnsType {
			t.Fatalf("GET %s asking for the compact form: Content-Type %q", path, ct)
		}
		if len(compact) >= len(plain) {
			t.Errorf("GET %s: the compact form is %d bytes, the nested %d", path, len(compact), len(plain))
		}
		decoded, err := httpapi.DecodeTree(ct, bytes.NewReader(compact))
		if err != nil {
			t.Fatal(err)
		}
		if want, have := mustJSON(t, nested), mustJSON(t, decoded); want != have {
			t.Fatalf("GET %s: the compact form says\n%s\nthe nested JSON\n%s", path, have, want)
		}
		// The form v2, the subtree's and the forest's, to a client that
		// lists both compact forms (the SDK).
		ct, rows := get(httpapi.TreeRowsType + ", " + httpapi.TreeColumnsType + ";q=0.9, application/json;q=0.5")
		if ct != httpapi.TreeRowsType {
			t.Fatalf("GET %s asking for the form v2: Content-Type %q, want %q", path, ct, httpapi.TreeRowsType)
		}
		if decoded, err = httpapi.DecodeTree(ct, bytes.NewReader(rows)); err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, rows)
		}
		if want, have := mustJSON(t, nested), mustJSON(t, decoded); want != have {
			t.Fatalf("GET %s: the form v2 says\n%s\nthe nested JSON\n%s", path, have, want)
		}
		id := root.ID
		if path == "/v1/tree" {
			id = 0
		}
		sdk, err := c.Tree(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want, have := mustJSON(t, nested), mustJSON(t, sdk); want != have {
			t.Fatalf("client.Tree(%d) says\n%s\nthe nested JSON\n%s", id, have, want)
		}
	}
}
