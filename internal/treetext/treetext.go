// Package treetext draws trees as indented text: the "├── ", "└── " and
// "│   " glyphs before each line of "kin tree" and "kin top".
package treetext

// Walk visits the trees under tops depth first, in order. visit gets each
// node with the glyphs to draw before it ("" for a top, "│   ├── " for a
// grandchild) and returns the children to descend into, in the order to
// draw them (nil for none, or to leave its subtree out).
func Walk[N any](tops []N, visit func(n N, prefix string) []N) {
	var walk func(n N, indent, branch string)
	walk = func(n N, indent, branch string) {
		kids := visit(n, indent+branch)
		switch branch {
		case mid:
			indent += "│   "
		case last:
			indent += "    "
		}
		for i, c := range kids {
			b := mid
			if i == len(kids)-1 {
				b = last
			}
			walk(c, indent, b)
		}
	}
	for _, n := range tops {
		walk(n, "", "")
	}
}

const (
	mid  = "├── " // before a child with siblings after it
	last = "└── " // before the last child
)
