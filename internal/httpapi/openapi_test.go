package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// openAPISpec is the part of an OpenAPI document the tests read.
type openAPISpec struct {
	OpenAPI    string                                `json:"openapi"`
	Security   []map[string][]string                 `json:"security"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		SecuritySchemes map[string]struct {
			Type   string `json:"type"`
			Scheme string `json:"scheme"`
		} `json:"securitySchemes"`
		Parameters map[string]openAPIParam    `json:"parameters"`
		Responses  map[string]json.RawMessage `json:"responses"`
		Schemas    map[string]openAPISchema   `json:"schemas"`
	} `json:"components"`
}

type openAPIParam struct {
	Ref  string `json:"$ref"`
	Name string `json:"name"`
	In   string `json:"in"`
}

type openAPIOperation struct {
	Parameters []openAPIParam             `json:"parameters"`
	Responses  map[string]openAPIResponse `json:"responses"`
}

type openAPIResponse struct {
	Ref string `json:"$ref"`
}

type openAPISchema struct {
	Ref                  string                   `json:"$ref"`
	Type                 string                   `json:"type"`
	Properties           map[string]openAPISchema `json:"properties"`
	Required             []string                 `json:"required"`
	Enum                 []string                 `json:"enum"`
	AllOf                []openAPISchema          `json:"allOf"`
	Items                *openAPISchema           `json:"items"`
	AdditionalProperties json.RawMessage          `json:"additionalProperties"`
	HTTPStatus           map[string]int           `json:"x-kin-http-status"`
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func loadSpec(t *testing.T) openAPISpec {
	t.Helper()
	var spec openAPISpec
	if err := json.Unmarshal(httpapi.OpenAPI(), &spec); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	if spec.OpenAPI != "3.0.3" {
		t.Fatalf("openapi = %q, want 3.0.3", spec.OpenAPI)
	}
	return spec
}

func operation(t *testing.T, spec openAPISpec, method, path string) (openAPIOperation, bool) {
	t.Helper()
	raw, ok := spec.Paths[path][strings.ToLower(method)]
	if !ok {
		return openAPIOperation{}, false
	}
	var op openAPIOperation
	if err := json.Unmarshal(raw, &op); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return op, true
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	spec := loadSpec(t)
	for _, rt := range httpapi.Routes() {
		if _, ok := operation(t, spec, rt.Method, rt.Pattern); !ok {
			t.Errorf("route %s %s is not in openapi.json", rt.Method, rt.Pattern)
		}
	}
}

func TestOpenAPIDocumentsOnlyRoutes(t *testing.T) {
	spec := loadSpec(t)
	registered := map[string]bool{}
	for _, rt := range httpapi.Routes() {
		registered[strings.ToLower(rt.Method)+" "+rt.Pattern] = true
	}
	pathKeys := []string{"summary", "description", "servers", "parameters"}
	for path, item := range spec.Paths {
		for key := range item {
			switch {
			case slices.Contains(httpMethods, key):
				if !registered[key+" "+path] {
					t.Errorf("openapi.json documents %s %s, which is not a route (stale docs?)", strings.ToUpper(key), path)
				}
			case !slices.Contains(pathKeys, key):
				t.Errorf("openapi.json path %s has an unknown key %q", path, key)
			}
		}
	}
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// TestOpenAPIPathParameters checks that every {name} in a path is declared
// as a path parameter of each of its operations, and nothing else is.
func TestOpenAPIPathParameters(t *testing.T) {
	spec := loadSpec(t)
	resolve := func(p openAPIParam) openAPIParam {
		if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
			r, found := spec.Components.Parameters[name]
			if !found {
				t.Errorf("parameter %s is not defined", p.Ref)
			}
			return r
		}
		return p
	}
	for path, item := range spec.Paths {
		var want []string
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			want = append(want, m[1])
		}
		var shared []openAPIParam
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				t.Fatal(err)
			}
		}
		for _, method := range httpMethods {
			op, ok := operation(t, spec, method, path)
			if !ok {
				continue
			}
			var got []string
			for _, p := range append(slices.Clone(shared), op.Parameters...) {
				if p = resolve(p); p.In == "path" {
					got = append(got, p.Name)
				}
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s %s declares path parameters %v, want %v", strings.ToUpper(method), path, got, want)
			}
		}
	}
}

// TestOpenAPIRefsResolve walks the whole document: every "$ref" names a
// component that exists.
func TestOpenAPIRefsResolve(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				target, ok := strings.CutPrefix(ref, "#/")
				if !ok {
					t.Errorf("%s: $ref %q is not local", where, ref)
					return
				}
				var node any = doc
				for _, part := range strings.Split(target, "/") {
					m, _ := node.(map[string]any)
					if node = m[part]; node == nil {
						t.Errorf("%s: $ref %q does not resolve", where, ref)
						return
					}
				}
			}
			for k, child := range v {
				walk(where+"/"+k, child)
			}
		case []any:
			for i, child := range v {
				walk(where+"/"+strconv.Itoa(i), child)
			}
		}
	}
	walk("#", doc)
}

func TestOpenAPISecurity(t *testing.T) {
	spec := loadSpec(t)
	sch, ok := spec.Components.SecuritySchemes["operatorToken"]
	if !ok || sch.Type != "http" || sch.Scheme != "bearer" {
		t.Fatalf("securitySchemes.operatorToken = %+v, want an http bearer scheme", sch)
	}
	if len(spec.Security) != 1 || spec.Security[0]["operatorToken"] == nil {
		t.Fatalf("security = %v, want [{operatorToken: []}]", spec.Security)
	}
}

// kinErrorCodes reads every ErrorCode constant declared in package kin's
// source (error.go, and permission.go for the permission authority's), so
// that a code added there without a status or docs fails here.
func kinErrorCodes(t *testing.T) []kin.ErrorCode {
	t.Helper()
	var codes []kin.ErrorCode
	for _, name := range []string{"error.go", "permission.go"} {
		codes = append(codes, errorCodesIn(t, "../../kin/"+name)...)
	}
	if len(codes) < 10 {
		t.Fatalf("found only %d error codes in kin: %v", len(codes), codes)
	}
	return codes
}

func errorCodesIn(t *testing.T, path string) []kin.ErrorCode {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []kin.ErrorCode
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "ErrorCode" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("an ErrorCode constant is not a string literal: %T", v)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, kin.ErrorCode(s))
			}
		}
	}
	if len(codes) == 0 {
		t.Fatalf("found no error codes in %s", path)
	}
	return codes
}

// kinEventTypes reads every Event* string constant declared in package
// kin's event.go, so that a new event type must be documented.
func kinEventTypes(t *testing.T) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "../../kin/event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Event") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					types = append(types, s)
				}
			}
		}
	}
	if len(types) < 6 {
		t.Fatalf("found only %d event types in kin/event.go: %v", len(types), types)
	}
	return types
}

func TestOpenAPIEventTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Description string `json:"description"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	desc := doc.Components.Schemas["Event"].Description
	for _, typ := range kinEventTypes(t) {
		if !strings.Contains(desc, "- `"+typ+"`: ") {
			t.Errorf("event type %q is not listed in the Event schema's description", typ)
		}
	}
}

func TestOpenAPIRestartPolicies(t *testing.T) {
	spec := loadSpec(t)
	enum := spec.Components.Schemas["RestartPolicy"].Enum
	for _, p := range enum {
		if !kin.RestartPolicy(p).Valid() {
			t.Errorf("RestartPolicy enum has %q, which kin does not accept", p)
		}
	}
	for _, p := range []kin.RestartPolicy{kin.RestartNever, kin.RestartOnFailure, kin.RestartAlways} {
		if !slices.Contains(enum, string(p)) {
			t.Errorf("restart policy %q is missing from the RestartPolicy enum", p)
		}
	}
}

func TestOpenAPIResultStatuses(t *testing.T) {
	spec := loadSpec(t)
	enum := spec.Components.Schemas["ResultStatus"].Enum
	want := []string{string(kin.ResultRunning), string(kin.ResultCompleted), string(kin.ResultContractViolated),
		string(kin.ResultFailed), string(kin.ResultCancelled)}
	if !slices.Equal(enum, want) {
		t.Errorf("ResultStatus enum = %v, want %v", enum, want)
	}
	for _, s := range enum {
		if kin.ResultStatus(s).Ended() != (s != string(kin.ResultRunning)) {
			t.Errorf("ResultStatus %q: Ended() disagrees with the schema's description", s)
		}
	}
}

func TestOpenAPIErrorCodes(t *testing.T) {
	spec := loadSpec(t)
	code := spec.Components.Schemas["Error"].Properties["code"]
	table := httpapi.StatusTable()
	for c, status := range table {
		if !slices.Contains(code.Enum, string(c)) {
			t.Errorf("error code %q (status.go) is missing from the Error schema's enum", c)
		}
		if got := code.HTTPStatus[string(c)]; got != status {
			t.Errorf("openapi.json gives code %q status %d; status.go gives %d", c, got, status)
		}
	}
	for _, c := range code.Enum {
		if _, ok := table[kin.ErrorCode(c)]; !ok {
			t.Errorf("the Error schema's enum has %q, which status.go does not know", c)
		}
	}
	if len(code.HTTPStatus) != len(table) {
		t.Errorf("x-kin-http-status has %d codes, status.go %d", len(code.HTTPStatus), len(table))
	}
	for _, c := range kinErrorCodes(t) {
		if _, ok := table[c]; !ok {
			t.Errorf("kin.ErrorCode %q has no HTTP status in status.go", c)
		}
	}
}

// TestOpenAPIErrorStatusesAreUsed checks that every status the table can
// answer is documented on some operation, with an Error body.
func TestOpenAPIErrorStatusesAreUsed(t *testing.T) {
	spec := loadSpec(t)
	used := map[string]bool{}
	for _, rt := range httpapi.Routes() {
		op, ok := operation(t, spec, rt.Method, rt.Pattern)
		if !ok {
			continue // TestOpenAPIDocumentsEveryRoute reports it
		}
		for status, resp := range op.Responses {
			used[status] = true
			if status[0] != '4' && status[0] != '5' {
				continue
			}
			name, ok := strings.CutPrefix(resp.Ref, "#/components/responses/")
			if !ok {
				t.Errorf("%s %s: the %s answer is not one of the shared error responses", rt.Method, rt.Pattern, status)
				continue
			}
			var r struct {
				Content map[string]struct {
					Schema openAPISchema `json:"schema"`
				} `json:"content"`
			}
			if err := json.Unmarshal(spec.Components.Responses[name], &r); err != nil {
				t.Fatal(err)
			}
			if got := r.Content["application/json"].Schema.Ref; got != "#/components/schemas/Error" {
				t.Errorf("response %s has schema %q, want the Error schema", name, got)
			}
		}
		if _, ok := op.Responses["401"]; !ok {
			t.Errorf("%s %s does not document 401 (the TCP listener's token check)", rt.Method, rt.Pattern)
		}
	}
	for c, status := range httpapi.StatusTable() {
		if !used[strconv.Itoa(status)] {
			t.Errorf("no operation documents status %d (code %s)", status, c)
		}
	}
}

// jsonFields returns the JSON names of t's fields, and which of them are
// always present (no omitempty or omitzero), following embedded structs.
func jsonFields(t reflect.Type) (all, always []string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			a, b := jsonFields(f.Type)
			all, always = append(all, a...), append(always, b...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if !strings.Contains(","+opts+",", ",omitempty,") && !strings.Contains(","+opts+",", ",omitzero,") {
			always = append(always, name)
		}
	}
	slices.Sort(all)
	slices.Sort(always)
	return all, always
}

func TestOpenAPIAgentSchemaHasEveryField(t *testing.T) {
	spec := loadSpec(t)
	agent := spec.Components.Schemas["Agent"]
	fields, _ := jsonFields(reflect.TypeFor[kin.Agent]())
	for _, f := range fields {
		if _, ok := agent.Properties[f]; !ok {
			t.Errorf("kin.Agent's JSON field %q is missing from the Agent schema", f)
		}
	}
}

// TestOpenAPISchemasMatchGoTypes holds each object schema to the Go type
// it describes: the same properties, no more, no fewer; for what the server
// sends, "required" is exactly the fields that are never omitted.
func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	spec := loadSpec(t)
	for _, tc := range []struct {
		schema string
		typ    reflect.Type
		sent   bool // the server sends it (else it receives it)
	}{
		{"Agent", reflect.TypeFor[kin.Agent](), true},
		{"RegisterRequest", reflect.TypeFor[kin.RegisterRequest](), false},
		{"StatusBody", reflect.TypeFor[httpapi.StatusBody](), false},
		{"GovernorSettingBody", reflect.TypeFor[httpapi.GovernorSettingBody](), false},
		{"GovernorInfo", reflect.TypeFor[kin.GovernorInfo](), true},
		{"Profile", reflect.TypeFor[kin.Profile](), true},
		{"RoleRule", reflect.TypeFor[kin.RoleRule](), true},
		{"CircuitBreaker", reflect.TypeFor[kin.CircuitBreaker](), true},
		{"DaemonStatus", reflect.TypeFor[kin.DaemonStatus](), true},
		{"Heartbeat", reflect.TypeFor[kin.Heartbeat](), true},
		{"RestartIntensity", reflect.TypeFor[kin.RestartIntensity](), true},
		{"Exit", reflect.TypeFor[kin.Exit](), true},
		{"SpawnRequest", reflect.TypeFor[kin.SpawnRequest](), false},
		{"StopBody", reflect.TypeFor[httpapi.StopBody](), false},
		{"HeartbeatRequest", reflect.TypeFor[kin.HeartbeatRequest](), false},
		{"Handoff", reflect.TypeFor[kin.Handoff](), false},
		{"Ref", reflect.TypeFor[kin.Ref](), false},
		{"WaitBody", reflect.TypeFor[httpapi.WaitBody](), false},
		{"AgentResult", reflect.TypeFor[kin.AgentResult](), true},
		{"ContextPack", reflect.TypeFor[kin.ContextPack](), true},
		{"PackChild", reflect.TypeFor[handoff.PackChild](), true},
		{"PackArtifact", reflect.TypeFor[handoff.PackArtifact](), true},
		{"Error", reflect.TypeFor[httpapi.ErrorBody](), true},
		{"Policy", reflect.TypeFor[kin.Policy](), false},
		{"ToolRules", reflect.TypeFor[kin.ToolRules](), false},
		{"SpawnRules", reflect.TypeFor[kin.SpawnRules](), false},
		{"Budget", reflect.TypeFor[kin.Budget](), false},
		{"Visibility", reflect.TypeFor[kin.Visibility](), false},
		{"Template", reflect.TypeFor[kin.Template](), false},
		{"TemplateFile", reflect.TypeFor[kin.TemplateFile](), false},
		{"AgentPolicy", reflect.TypeFor[kin.AgentPolicy](), true},
		{"AgentResources", reflect.TypeFor[kin.AgentResources](), true},
		{"EffectivePolicy", reflect.TypeFor[kin.EffectivePolicy](), true},
		{"PolicyLayer", reflect.TypeFor[kin.PolicyLayer](), true},
		{"Spend", reflect.TypeFor[kin.Spend](), true},
		{"Excess", reflect.TypeFor[kin.Excess](), true},
		{"Decision", reflect.TypeFor[kin.Decision](), true},
		{"Explanation", reflect.TypeFor[kin.Explanation](), true},
		{"Message", reflect.TypeFor[kin.Message](), true},
		{"AuthorizeRequest", reflect.TypeFor[kin.AuthorizeRequest](), false},
		{"UsageRequest", reflect.TypeFor[kin.UsageRequest](), false},
		{"PromoteBody", reflect.TypeFor[httpapi.PromoteBody](), false},
		{"ReadRequest", reflect.TypeFor[kin.ReadRequest](), false},
		{"SendRequest", reflect.TypeFor[kin.SendRequest](), false},
		{"AgentToken", reflect.TypeFor[kin.AgentToken](), true},
		{"GrantRequest", reflect.TypeFor[kin.GrantRequest](), false},
		{"Grant", reflect.TypeFor[kin.Grant](), true},
		{"UngrantRequest", reflect.TypeFor[kin.UngrantRequest](), false},
		{"AuthToken", reflect.TypeFor[kin.AuthToken](), true},
		{"RotateBody", reflect.TypeFor[httpapi.RotateBody](), false},
		{"KeyRotation", reflect.TypeFor[kin.KeyRotation](), true},
	} {
		sch, ok := spec.Components.Schemas[tc.schema]
		if !ok {
			t.Errorf("schema %s is missing", tc.schema)
			continue
		}
		all, always := jsonFields(tc.typ)
		var props []string
		for p := range sch.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		if !slices.Equal(props, all) {
			t.Errorf("schema %s has properties %v; %s has JSON fields %v", tc.schema, props, tc.typ, all)
		}
		required := slices.Sorted(slices.Values(sch.Required))
		if tc.sent && !slices.Equal(required, always) {
			t.Errorf("schema %s requires %v; %s always sends %v", tc.schema, required, tc.typ, always)
		}
		if !tc.sent && string(sch.AdditionalProperties) != "false" {
			t.Errorf("schema %s allows additional properties, but the server rejects unknown fields", tc.schema)
		}
	}
}

func TestOpenAPITreeNodeAndEvent(t *testing.T) {
	spec := loadSpec(t)
	tree := spec.Components.Schemas["TreeNode"]
	var agent, children, spend bool
	for _, part := range tree.AllOf {
		agent = agent || part.Ref == "#/components/schemas/Agent"
		if c, ok := part.Properties["children"]; ok {
			children = c.Type == "array" && c.Items != nil && c.Items.Ref == "#/components/schemas/TreeNode"
		}
		if s, ok := part.Properties["spend"]; ok {
			spend = len(s.AllOf) == 1 && s.AllOf[0].Ref == "#/components/schemas/Spend" && !slices.Contains(part.Required, "spend")
		}
	}
	if !agent || !children || !spend {
		t.Errorf("TreeNode must be an Agent with children: []TreeNode and an optional spend: Spend; got %+v", tree)
	}

	ev := spec.Components.Schemas["Event"]
	if string(ev.AdditionalProperties) != "true" {
		t.Errorf("Event must allow additional properties (the type's own fields), got %s", ev.AdditionalProperties)
	}
	e, err := kin.NewEvent(kin.EventChildSpawned, 2, 1, map[string]any{"parent": 1, "child": 2})
	if err != nil {
		t.Fatal(err)
	}
	e.Seq, e.Time = 3, time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]any
	if err := json.Unmarshal(b, &flat); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"seq", "time", "type"} {
		if _, ok := flat[f]; !ok {
			t.Errorf("a marshalled kin.Event has no %q", f)
		}
		if _, ok := ev.Properties[f]; !ok || !slices.Contains(ev.Required, f) {
			t.Errorf("the Event schema must require %q", f)
		}
	}
}

// TestOpenAPIServed checks that the daemon serves the embedded document,
// byte for byte, on both listeners: with the token over TCP, and without
// one over the Unix socket.
func TestOpenAPIServed(t *testing.T) {
	onDisk, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, httpapi.OpenAPI()) {
		t.Fatal("the embedded document differs from openapi.json")
	}
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	unix := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, "unix", d.SocketPath())
		},
	}}
	defer unix.CloseIdleConnections()
	for _, tc := range []struct {
		name   string
		client *http.Client
		url    string
		token  string
	}{
		{"tcp", http.DefaultClient, "http://" + d.HTTPAddr() + "/v1/openapi.json", d.OperatorToken()},
		{"unix", unix, "http://kin/v1/openapi.json", ""},
	} {
		req, err := http.NewRequestWithContext(ctx, "GET", tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := tc.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: GET /v1/openapi.json = %s, Content-Type %q", tc.name, resp.Status, resp.Header.Get("Content-Type"))
		}
		if !bytes.Equal(body, onDisk) {
			t.Errorf("%s: GET /v1/openapi.json served %d bytes that differ from openapi.json (%d bytes)", tc.name, len(body), len(onDisk))
		}
	}
}
