package main

import (
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
)

// session is a session named name, a child of parent unless parent is "".
func session(name, parent string, tokens int64, phase v1alpha1.Phase) v1alpha1.AgentSession {
	s := v1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1alpha1.AgentSessionSpec{
			Prompt: "task of " + name,
			Model:  v1alpha1.ModelSpec{Provider: v1alpha1.ProviderScripted, Name: "demo", ScriptConfigMapRef: &v1alpha1.ConfigMapKeyRef{Name: "s"}},
		},
		Status: v1alpha1.AgentSessionStatus{Phase: phase, Turns: 2, Usage: v1alpha1.Usage{Input: tokens - 1, Output: 1, Total: tokens},
			TreeTokens: tokens},
	}
	if parent != "" {
		s.Spec.ParentRef = &v1alpha1.ParentReference{Name: parent, UID: "uid-" + parent}
		s.Spec.Depth = ptr.To[int32](1)
	}
	return s
}

// withTree sets the status.treeTokens the controller would have rolled up.
func withTree(s v1alpha1.AgentSession, treeTokens int64) v1alpha1.AgentSession {
	s.Status.TreeTokens = treeTokens
	return s
}

func TestSessionTree(t *testing.T) {
	cases := []struct {
		name  string
		items []v1alpha1.AgentSession
		want  []string // "<tree name> <status.treeTokens>"
	}{
		{"flat sessions are sorted roots", []v1alpha1.AgentSession{
			session("b", "", 5, ""), session("a", "", 7, ""),
		}, []string{"a 7", "b 5"}},
		{"children under their parent, with status.treeTokens", []v1alpha1.AgentSession{
			session("lead-sub-2", "lead", 20, ""), session("other", "", 1, ""), withTree(session("lead", "", 100, ""), 133),
			withTree(session("lead-sub-1", "lead", 10, ""), 13), session("lead-sub-1-sub-1", "lead-sub-1", 3, ""),
		}, []string{
			"lead 133",
			"├─ lead-sub-1 13",
			"│  └─ lead-sub-1-sub-1 3",
			"└─ lead-sub-2 20",
			"other 1",
		}},
		{"a child whose parent is not listed is a root", []v1alpha1.AgentSession{
			session("orphan", "gone", 4, ""),
		}, []string{"orphan 4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range sessionTree(tc.items) {
				got = append(got, r.name+" "+strconv.FormatInt(r.s.Status.TreeTokens, 10))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestGetShowsTheSubagentTree: against the API server, `get` lists the
// sessions as a tree with phases and tokens, and `get NAME` describes a
// parent with the tree of its subagents and the tokens of the whole tree.
func TestGetShowsTheSubagentTree(t *testing.T) {
	ctx := t.Context()
	c := kubeClient(t)
	create := func(s v1alpha1.AgentSession, parent *v1alpha1.AgentSession) *v1alpha1.AgentSession {
		t.Helper()
		status := s.Status
		s.UID = ""
		if parent != nil {
			s.Spec.ParentRef.UID = string(parent.UID)
		}
		if err := c.Create(ctx, &s); err != nil {
			t.Fatalf("create %s: %v", s.Name, err)
		}
		s.Status = status
		if err := c.Status().Update(ctx, &s); err != nil {
			t.Fatalf("status of %s: %v", s.Name, err)
		}
		return &s
	}
	priced := withTree(session("tree-lead", "", 100, v1alpha1.PhaseRunning), 142)
	priced.Status.Cost, priced.Status.TreeCost, priced.Status.Currency = "0.001000", "0.004200", "USD"
	lead := create(priced, nil)
	create(session("tree-lead-sub-1", "tree-lead", 30, v1alpha1.PhaseSucceeded), lead)
	create(session("tree-lead-sub-2", "tree-lead", 12, v1alpha1.PhaseRunning), lead)

	out, err := cli(t, "", "get")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	for _, want := range [][]string{
		{"NAME", "PHASE", "MODEL", "PARENT", "TURNS", "TOKENS", "TREE TOKENS", "COST", "AGE"},
		{"tree-lead ", "Running", "demo", "2", "100", "142", "0.004200"},
		{"├─ tree-lead-sub-1", "Succeeded", "demo", "tree-lead", "2", "30", "30"},
		{"└─ tree-lead-sub-2", "Running", "demo", "tree-lead", "2", "12", "12"},
	} {
		if !hasLine(out, want) {
			t.Errorf("get printed no line with %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "tree-lead ") > strings.Index(out, "├─ tree-lead-sub-1") {
		t.Errorf("children before their parent:\n%s", out)
	}

	out, err = cli(t, "", "get", "tree-lead")
	if err != nil {
		t.Fatalf("get tree-lead: %v", err)
	}
	for _, want := range [][]string{
		{"Name:", "default/tree-lead"},
		{"Tokens with subagents:", "142"},
		{"Cost:", "0.001000 USD (with subagents 0.004200)"},
		{"Subagents:"},
		{"├─ tree-lead-sub-1", "Succeeded", "2", "30", "30"},
		{"└─ tree-lead-sub-2", "Running", "2", "12", "12"},
	} {
		if !hasLine(out, want) {
			t.Errorf("get tree-lead printed no line with %q:\n%s", want, out)
		}
	}
	out, err = cli(t, "", "get", "tree-lead-sub-1")
	if err != nil || strings.Contains(out, "Subagents:") || !strings.Contains(out, "default/tree-lead-sub-1") {
		t.Errorf("get of a leaf: %v\n%s", err, out)
	}
}

// hasLine reports whether a line of out holds all fields, in order.
func hasLine(out string, fields []string) bool {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := line, true
		for _, f := range fields {
			i := strings.Index(rest, f)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(f):]
		}
		if ok {
			return true
		}
	}
	return false
}

// TestGetPrintsTheStatusInert: a result and an error the model wrote with
// escape sequences print without a control character (FR-OUT-02).
func TestGetPrintsTheStatusInert(t *testing.T) {
	ctx := t.Context()
	c := kubeClient(t)
	s := session("hostile-status", "", 5, v1alpha1.PhaseFailed)
	s.UID = ""
	status := s.Status
	if err := c.Create(ctx, &s); err != nil {
		t.Fatal(err)
	}
	status.Result = "done\x1b]0;owned\x07\x1b[2J\u009b31m!"
	status.Error = "bad\x1b[1A\rhidden"
	s.Status = status
	if err := c.Status().Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, "", "get", "hostile-status")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if strings.ContainsAny(out, "\x1b\x07\r\u009b") {
		t.Errorf("get printed a control character: %q", out)
	}
	for _, want := range []string{"Result:\ndone!\n", "bad^Mhidden"} {
		if !strings.Contains(out, want) {
			t.Errorf("get printed no %q: %q", want, out)
		}
	}
}
