package canonical

import "fmt"

// Layout is a job's replicas as the canonical sums see them: Replicas in
// all, Local to a process, over the micro-shards of Shards.
type Layout struct {
	Shards          Shards
	Replicas, Local int
}

// Plan is what a replica computes in every step: its slots (micro-shards,
// padding included; Step left 0) and the sums it hands on (items), in
// tree order.
type Plan struct {
	Slots []MicroShard
	// items are covering nodes of the replica's micro-shards, or with
	// leaves, every slot's own gradient (padding dropped on the host).
	Items  []Node
	Leaves bool
}

// PlanOf is global replica r's plan: its covering nodes, unless a local
// replica of its process has another shape of work, when every one of
// them sends its leaves, padded to the most micro-shards any of them has.
func (l Layout) PlanOf(r int) Plan {
	first, end := l.Shards.Range(r, l.Replicas)
	var p Plan
	shape := func(q int) string {
		f, e := l.Shards.Range(q, l.Replicas)
		var s []int
		for _, n := range Covering(l.Shards.Count, f, e) {
			s = append(s, n.Hi-n.Lo)
		}
		return fmt.Sprint(s)
	}
	slots := end - first
	base := r - r%l.Local
	for q := base; q < base+l.Local; q++ {
		f, e := l.Shards.Range(q, l.Replicas)
		slots = max(slots, e-f)
		if shape(q) != shape(r) {
			p.Leaves = true
		}
	}
	for j := range slots {
		s := MicroShard{Slot: j, Index: first + j, Size: l.Shards.Size}
		if first+j >= end {
			s.Index, s.Padding = first, true
		}
		s.First = s.Index * s.Size
		p.Slots = append(p.Slots, s)
		if p.Leaves {
			p.Items = append(p.Items, Node{Lo: s.Index, Hi: s.Index + 1})
		}
	}
	if !p.Leaves {
		p.Items = Covering(l.Shards.Count, first, end)
	}
	return p
}

// ProcessNodes is process q's real items, in tree order: what it sends.
func (l Layout) ProcessNodes(q int) []Node {
	var out []Node
	for r := q * l.Local; r < (q+1)*l.Local; r++ {
		p := l.PlanOf(r)
		for j, n := range p.Items {
			if !p.Leaves || !p.Slots[j].Padding {
				out = append(out, n)
			}
		}
	}
	return out
}
