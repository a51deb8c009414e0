package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/kin-agents/kin/internal/treetext"
	"github.com/kin-agents/kin/kin"
)

// treeFormat names a rendering of the lineage tree.
type treeFormat string

const (
	formatText    treeFormat = "text"
	formatJSON    treeFormat = "json"
	formatMermaid treeFormat = "mermaid"
	formatDOT     treeFormat = "dot"
)

var treeFormats = []treeFormat{formatText, formatJSON, formatMermaid, formatDOT}

// renderTree writes forest in format. Every renderer is deterministic:
// siblings are ordered by id and nothing depends on map order or the clock.
func renderTree(w io.Writer, forest []*kin.TreeNode, format treeFormat) error {
	bw := bufio.NewWriter(w)
	switch format {
	case formatText:
		renderTreeText(bw, forest)
	case formatJSON:
		if err := renderTreeJSON(bw, forest); err != nil {
			return err
		}
	case formatMermaid:
		renderTreeMermaid(bw, forest)
	case formatDOT:
		renderTreeDOT(bw, forest)
	default:
		return fmt.Errorf("unknown tree format %q", format)
	}
	return bw.Flush()
}

// byID returns nodes sorted by agent id, leaving the input alone.
func byID(nodes []*kin.TreeNode) []*kin.TreeNode {
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b *kin.TreeNode) int { return int(a.ID - b.ID) })
	return out
}

// renderTreeText draws an indented tree:
//
//	#1 Research-Coordinator  role=coordinator gen=0 status=active state=active pid=4242 responsible="Dr. Schmidt"
//	├── #2 Data-Collector  role=collector gen=1 status=active state=registered
//	│   └── #5 Web-Scraper  role=scraper gen=2 status=terminated state=cancelled signal=terminated reason=stopped
//	└── #3 Report-Writer  ...  tokens 1200/5000 cost 0.40/1.00 spawns 3/10
//
// A node with a budget or reported spend ends with its subtree's spend
// against the budget (spendString).
func renderTreeText(w io.Writer, forest []*kin.TreeNode) {
	if len(forest) == 0 {
		fmt.Fprintln(w, "(no agents)")
		return
	}
	var all []*kin.Agent
	treetext.Walk(forest, func(n *kin.TreeNode, _ string) []*kin.TreeNode {
		all = append(all, &n.Agent)
		return n.Children
	})
	fleet := kin.SpansHosts(slices.Values(all))
	treetext.Walk(byID(forest), func(n *kin.TreeNode, prefix string) []*kin.TreeNode {
		line := fmt.Sprintf("#%d %s  role=%s gen=%d status=%s state=%s",
			n.ID, n.Name, orDash(n.Role), n.Generation, n.Status, stateString(&n.Agent))
		line += runtimeText(&n.Agent)
		if fleet {
			line += " host=" + kvString(orDash(n.Host))
		}
		if prefix == "" { // a top
			line += " responsible=" + kvString(n.Responsible)
		}
		if s := spendString(n.Spend); s != "" {
			line += "  " + s
		}
		fmt.Fprintf(w, "%s%s\n", prefix, line)
		return byID(n.Children)
	})
}

// runtimeText is what the text tree says of an agent's process: its pid
// while it runs; how and why it ended once it has.
func runtimeText(a *kin.Agent) string {
	switch {
	case a.Running():
		return " pid=" + strconv.Itoa(a.PID)
	case a.EndedAt.IsZero() && a.Exit == nil:
		return ""
	}
	s := ""
	switch e := a.Exit; {
	case e == nil:
	case !e.Known:
		s += " exit=unknown"
	case e.Signal != "":
		s += " signal=" + kvString(e.Signal)
	default:
		s += " exit=" + strconv.Itoa(e.Code)
	}
	if a.EndReason != "" {
		s += " reason=" + kvString(a.EndReason)
	}
	return s
}

// renderTreeJSON writes the forest as Service.Tree returns it.
func renderTreeJSON(w io.Writer, forest []*kin.TreeNode) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(nonNil(forest))
}

// Fill colours by generation (seed 000's diagram: roots blue, children green,
// grandchildren yellow), then on around the wheel.
var (
	generationFills = []string{"#bbf", "#bfb", "#ffb", "#fdb", "#dbf", "#bff"}
	responsibleFill = "#f9f"
	inactiveFill    = "#ddd"
)

func generationFill(a *kin.Agent) string {
	if a.Status != kin.StatusActive {
		return inactiveFill
	}
	return generationFills[a.Generation%len(generationFills)]
}

// responsibleNodes names one node per responsible party of the top nodes,
// in order of first appearance.
func responsibleNodes(tops []*kin.TreeNode) (parties []string, nodeOf map[string]string) {
	nodeOf = map[string]string{}
	for _, n := range tops {
		if _, ok := nodeOf[n.Responsible]; !ok {
			parties = append(parties, n.Responsible)
			nodeOf[n.Responsible] = "R" + strconv.Itoa(len(parties))
		}
	}
	return parties, nodeOf
}

// breadthFirst returns every (parent, child) edge level by level, so that
// the diagram lists generations in order as seed 000's does.
func breadthFirst(tops []*kin.TreeNode) [][2]*kin.TreeNode {
	var edges [][2]*kin.TreeNode
	level := tops
	for len(level) > 0 {
		var next []*kin.TreeNode
		for _, n := range level {
			for _, c := range byID(n.Children) {
				edges = append(edges, [2]*kin.TreeNode{n, c})
				next = append(next, c)
			}
		}
		level = next
	}
	return edges
}

// topEdgeLabel is "registers" for a root; a subtree's top was spawned by an
// agent outside the drawing, so its party is only responsible for it.
func topEdgeLabel(n *kin.TreeNode) string {
	if n.Parent == 0 {
		return "registers"
	}
	return "responsible for"
}

// agentLabelLines is the text of an agent's node: seed 000's
// "Agent #N — name", "Generation G", the role, and the status unless active.
// esc escapes the agent's own words for the target language.
func agentLabelLines(a *kin.Agent, esc func(string) string) []string {
	lines := []string{fmt.Sprintf("Agent #%d — %s", a.ID, esc(a.Name)), fmt.Sprintf("Generation %d", a.Generation)}
	if a.Role != "" {
		lines = append(lines, esc(a.Role))
	}
	if a.Status != kin.StatusActive {
		lines = append(lines, esc(string(a.Status)))
	}
	return lines
}

// renderTreeMermaid draws a Mermaid flowchart in the shape of seed 000's.
func renderTreeMermaid(w io.Writer, forest []*kin.TreeNode) {
	tops := byID(forest)
	parties, partyNode := responsibleNodes(tops)
	fmt.Fprintln(w, "graph TD")
	for _, p := range parties {
		fmt.Fprintf(w, "    %s[\"Responsible<br/>%s\"]\n", partyNode[p], mermaidText(orDash(p)))
	}
	node := func(a *kin.Agent) string {
		return fmt.Sprintf("A%d[\"%s\"]", a.ID, strings.Join(agentLabelLines(a, mermaidText), "<br/>"))
	}
	for _, n := range tops {
		arrow := "-->"
		if n.Parent != 0 {
			arrow = "-.->"
		}
		fmt.Fprintf(w, "    %s %s|\"%s\"| %s\n", partyNode[n.Responsible], arrow, topEdgeLabel(n), node(&n.Agent))
	}
	edges := breadthFirst(tops)
	for _, e := range edges {
		fmt.Fprintf(w, "    A%d -->|\"spawns\"| %s\n", e[0].ID, node(&e[1].Agent))
	}
	for _, p := range parties {
		fmt.Fprintf(w, "    style %s fill:%s,stroke:#333,color:#000\n", partyNode[p], responsibleFill)
	}
	style := func(a *kin.Agent) {
		extra := ""
		if a.Status != kin.StatusActive {
			extra = ",stroke-dasharray:5 5"
		}
		fmt.Fprintf(w, "    style A%d fill:%s,stroke:#333,color:#000%s\n", a.ID, generationFill(a), extra)
	}
	for _, n := range tops {
		style(&n.Agent)
	}
	for _, e := range edges {
		style(&e[1].Agent)
	}
}

// mermaidText escapes text for a quoted Mermaid label. Mermaid reads
// "#name;" and "#123;" as entity codes, so '#' itself is escaped too.
func mermaidText(s string) string {
	return strings.NewReplacer("#", "#35;", `"`, "#quot;", "<", "#lt;", ">", "#gt;").Replace(s)
}

// renderTreeDOT draws a Graphviz digraph with the same nodes and edges as
// the Mermaid diagram.
func renderTreeDOT(w io.Writer, forest []*kin.TreeNode) {
	tops := byID(forest)
	parties, partyNode := responsibleNodes(tops)
	fmt.Fprintln(w, "digraph kin {")
	fmt.Fprintln(w, "    rankdir=TB;")
	fmt.Fprintln(w, `    node [shape=box, style="rounded,filled", color="#333333", fontcolor="#000000", fontname="Helvetica"];`)
	fmt.Fprintln(w, `    edge [fontname="Helvetica", fontsize=10];`)
	for _, p := range parties {
		fmt.Fprintf(w, "    %s [label=%s, shape=ellipse, fillcolor=%s];\n",
			partyNode[p], dotString("Responsible\n"+orDash(p)), dotString(dotColor(responsibleFill)))
	}
	node := func(a *kin.Agent) {
		style := ""
		if a.Status != kin.StatusActive {
			style = `, style="rounded,filled,dashed"`
		}
		fmt.Fprintf(w, "    A%d [label=%s, fillcolor=%s%s];\n",
			a.ID, dotString(strings.Join(agentLabelLines(a, identity), "\n")), dotString(dotColor(generationFill(a))), style)
	}
	edges := breadthFirst(tops)
	for _, n := range tops {
		node(&n.Agent)
	}
	for _, e := range edges {
		node(&e[1].Agent)
	}
	for _, n := range tops {
		style := ""
		if n.Parent != 0 {
			style = ", style=dashed"
		}
		fmt.Fprintf(w, "    %s -> A%d [label=%s%s];\n", partyNode[n.Responsible], n.ID, dotString(topEdgeLabel(n)), style)
	}
	for _, e := range edges {
		fmt.Fprintf(w, "    A%d -> A%d [label=\"spawns\"];\n", e[0].ID, e[1].ID)
	}
	fmt.Fprintln(w, "}")
}

func identity(s string) string { return s }

// dotString quotes s as a DOT string; a newline becomes a centred line break.
func dotString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// dotColor expands CSS's short "#abc" to the "#aabbcc" Graphviz needs.
func dotColor(c string) string {
	if len(c) == 4 && c[0] == '#' {
		return string([]byte{'#', c[1], c[1], c[2], c[2], c[3], c[3]})
	}
	return c
}
