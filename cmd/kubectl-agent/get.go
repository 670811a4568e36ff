package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events/render"
)

func newGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get [NAME]",
		Short: "List sessions as a tree of subagents, or describe one with its subagents",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			var s v1alpha1.AgentSession
			if len(args) == 1 {
				if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, &s); err != nil {
					return fmt.Errorf("get agentsession %s/%s: %w", ns, args[0], err)
				}
			}
			var list v1alpha1.AgentSessionList
			if err := c.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
				return fmt.Errorf("list agentsessions in %s: %w", ns, err)
			}
			// Names, conditions, errors and results come from the cluster
			// (and the model): printed sanitized (FR-OUT-02).
			out := render.NewWriter(cmd.OutOrStdout())
			if len(args) == 1 {
				return describe(out, &s, list.Items)
			}
			return table(out, list.Items, time.Now())
		},
	}
}

// treeRow is one session of a tree: its name prefixed with the branches
// leading to it.
type treeRow struct {
	s     *v1alpha1.AgentSession
	name  string
	depth int // 0 for a root
}

// sessionTree orders items depth first, each child under its parent (matched
// by parentRef uid, else name), siblings by name. A session whose parent is
// not in items is a root.
func sessionTree(items []v1alpha1.AgentSession) []treeRow {
	byUID, byName := map[string]int{}, map[string]int{}
	for i, s := range items {
		byUID[string(s.UID)], byName[s.Name] = i, i
	}
	children := map[int][]int{}
	var roots []int
	for i, s := range items {
		p, ok := -1, false
		if ref := s.Spec.ParentRef; ref != nil {
			if ref.UID != "" {
				p, ok = byUID[ref.UID]
			} else {
				p, ok = byName[ref.Name]
			}
		}
		if ok && p != i {
			children[p] = append(children[p], i)
		} else {
			roots = append(roots, i)
		}
	}
	byNameOrder := func(a, b int) int { return strings.Compare(items[a].Name, items[b].Name) }
	slices.SortFunc(roots, byNameOrder)
	var rows []treeRow
	visited := map[int]bool{}
	var walk func(i, depth int, lead, branch string)
	walk = func(i, depth int, lead, branch string) {
		visited[i] = true
		rows = append(rows, treeRow{s: &items[i], name: lead + branch + items[i].Name, depth: depth})
		next := lead
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		kids := slices.DeleteFunc(slices.Clone(children[i]), func(k int) bool { return visited[k] })
		slices.SortFunc(kids, byNameOrder)
		for n, k := range kids {
			b := "├─ "
			if n == len(kids)-1 {
				b = "└─ "
			}
			walk(k, depth+1, next, b)
		}
	}
	for _, r := range roots {
		walk(r, 0, "", "")
	}
	return rows
}

// costCell is a cost for a table cell: "-" when the model is not priced.
func costCell(c string) string {
	if c == "" {
		return "-"
	}
	return c
}

// table prints the sessions as a tree: one line per session, children under
// their parent, with the tokens of each session and of its whole subtree
// (status.treeTokens, which the controller rolls up) and the subtree's cost
// (status.treeCost).
func table(w io.Writer, items []v1alpha1.AgentSession, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPHASE\tMODEL\tPARENT\tTURNS\tTOKENS\tTREE TOKENS\tCOST\tAGE")
	for _, r := range sessionTree(items) {
		s := r.s
		parent := ""
		if s.Spec.ParentRef != nil {
			parent = s.Spec.ParentRef.Name
		}
		age := duration.HumanDuration(now.Sub(s.CreationTimestamp.Time))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.name, s.Status.Phase, s.Spec.Model.Name, parent, s.Status.Turns, s.Status.Usage.Total, s.Status.TreeTokens, costCell(s.Status.TreeCost), age)
	}
	return tw.Flush()
}

// subtree returns the rows of the tree rooted at s (s first), from all the
// sessions of its namespace.
func subtree(s *v1alpha1.AgentSession, all []v1alpha1.AgentSession) []treeRow {
	rows := sessionTree(all)
	for i, r := range rows {
		if r.s.UID != s.UID || r.s.Name != s.Name {
			continue
		}
		items := []v1alpha1.AgentSession{*r.s}
		for _, d := range rows[i+1:] {
			if d.depth <= r.depth {
				break
			}
			items = append(items, *d.s)
		}
		return sessionTree(items)
	}
	return []treeRow{{s: s, name: s.Name}}
}

// describe prints the status of one session and the tree of its subagents
// (found among all, the sessions of its namespace).
func describe(w io.Writer, s *v1alpha1.AgentSession, all []v1alpha1.AgentSession) error {
	tree := subtree(s, all)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Name:\t%s/%s\n", s.Namespace, s.Name)
	fmt.Fprintf(tw, "Phase:\t%s\n", s.Status.Phase)
	fmt.Fprintf(tw, "Model:\t%s %s\n", s.Spec.Model.Provider, s.Spec.Model.Name)
	fmt.Fprintf(tw, "Turns:\t%d (tool calls %d)\n", s.Status.Turns, s.Status.ToolCalls)
	fmt.Fprintf(tw, "Tokens:\t%d in, %d out\n", s.Status.Usage.Input, s.Status.Usage.Output)
	if len(tree) > 1 {
		fmt.Fprintf(tw, "Tokens with subagents:\t%d\n", s.Status.TreeTokens)
	}
	if s.Status.Cost != "" || s.Status.TreeCost != "" {
		line := s.Status.Cost + " " + s.Status.Currency
		if len(tree) > 1 {
			line += " (with subagents " + s.Status.TreeCost + ")"
		}
		fmt.Fprintf(tw, "Cost:\t%s\n", line)
	}
	if c := s.Status.Context; c != nil {
		fmt.Fprintf(tw, "Context:\t%s\n", contextLine(c))
	}
	if s.Status.PodName != "" {
		fmt.Fprintf(tw, "Pod:\t%s\n", s.Status.PodName)
	}
	if s.Status.EventsSubject != "" {
		fmt.Fprintf(tw, "Events:\t%s (last seq %d)\n", s.Status.EventsSubject, s.Status.LastEventSequence)
	}
	for _, c := range s.Status.Conditions {
		fmt.Fprintf(tw, "Condition %s:\t%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	if s.Status.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", s.Status.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(tree) > 1 {
		fmt.Fprintln(w, "Subagents:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tPHASE\tTURNS\tTOKENS\tTREE TOKENS")
		for _, r := range tree[1:] {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\n", r.name, r.s.Status.Phase, r.s.Status.Turns, r.s.Status.Usage.Total, r.s.Status.TreeTokens)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(s.Status.Plan) > 0 {
		fmt.Fprint(w, planText(s.Status.Plan))
	}
	if s.Status.Result != "" {
		cut := ""
		if s.Status.ResultTruncated {
			cut = " (truncated; the full text is in kubectl agent logs)"
		}
		fmt.Fprintf(w, "Result%s:\n%s\n", cut, s.Status.Result)
	}
	return nil
}

// contextLine describes status.context: the last request against the
// window, and the compactions so far.
func contextLine(c *v1alpha1.ContextStatus) string {
	line := fmt.Sprintf("%d tokens in the last request", c.LastRequestTokens)
	if c.Window > 0 {
		line = fmt.Sprintf("%d of %d tokens in the last request (%d%%)", c.LastRequestTokens, c.Window,
			c.LastRequestTokens*100/c.Window)
	}
	if c.Compactions > 0 {
		line += fmt.Sprintf(", compacted %d times", c.Compactions)
	}
	return line
}

// planText renders status.plan as a checklist: [x] completed, [>] in
// progress, [ ] pending.
func planText(plan []v1alpha1.PlanStep) string {
	done := 0
	for _, st := range plan {
		if st.Status == v1alpha1.PlanStepCompleted {
			done++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Plan (%d/%d done):\n", done, len(plan))
	for _, st := range plan {
		mark := "[ ]"
		switch st.Status {
		case v1alpha1.PlanStepCompleted:
			mark = "[x]"
		case v1alpha1.PlanStepInProgress:
			mark = "[>]"
		}
		fmt.Fprintf(&b, "  %s %s\n", mark, st.Content)
	}
	return b.String()
}
