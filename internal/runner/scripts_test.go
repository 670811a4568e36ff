package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

// apiClient starts a real API server for the test and returns a client of it.
func apiClient(t *testing.T) client.Client {
	t.Helper()
	api, _ := apiServer(t)
	return api
}

// apiServer starts a real API server for the test and returns a client of
// it and its address and credentials.
func apiServer(t *testing.T) (client.Client, *rest.Config) {
	t.Helper()
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	api, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return api, cfg
}

// fullReads counts the reads of whole ConfigMaps through a real client.
type fullReads struct {
	client.Reader
	n atomic.Int32
}

func (r *fullReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		r.n.Add(1)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func errorsIsConfig(err error) bool { return err != nil && errors.Is(err, ErrConfig) }

// scriptedSession is a session whose script is key of ConfigMap cm ("" is
// the default key).
func scriptedSession(cm, key string) *agentsv1.AgentSession {
	return &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "child"},
		Spec: agentsv1.AgentSessionSpec{Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
			ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm, Key: key}}}}
}

// TestScriptCacheParsesOncePerRevision runs clientConfig for many sessions
// naming one script ConfigMap of a real API server: one revision is parsed
// once, whatever the concurrency; a new revision is parsed again; a broken
// revision fails every session with ErrConfig; a revision parsed is not
// read whole again.
func TestScriptCacheParsesOncePerRevision(t *testing.T) {
	api := apiClient(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fanout"},
		Data: map[string]string{"script.yaml": "turns:\n- text: one\n"}}
	if err := api.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	reader := &fullReads{Reader: api}
	cache := newScriptCache(DefaultScriptCacheSize)
	session := scriptedSession("fanout", "")

	steps := []struct {
		name       string
		data       string // the script written before the sessions start; "" keeps it
		sessions   int
		wantParses int64
		wantText   string // the first turn's text; "" expects ErrConfig
	}{
		{"first revision, concurrent sessions", "", 50, 1, "one"},
		{"same revision again", "", 50, 1, "one"},
		{"new revision", "turns:\n- text: two\n", 50, 2, "two"},
		{"broken revision", "turns: [", 20, 3, ""},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.data != "" {
				cm.Data["script.yaml"] = st.data
				if err := api.Update(t.Context(), cm); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, st.sessions)
			for range st.sessions {
				wg.Go(func() {
					cc, err := clientConfig(t.Context(), reader, cache, session)
					switch {
					case st.wantText == "" && !errorsIsConfig(err):
						errs <- fmt.Errorf("error %v, want ErrConfig", err)
					case st.wantText != "" && err != nil:
						errs <- err
					case st.wantText != "" && cc.Script.Turns[0].Text != st.wantText:
						errs <- fmt.Errorf("script says %q, want %q", cc.Script.Turns[0].Text, st.wantText)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := cache.parses.Load(); n != st.wantParses {
				t.Errorf("%d parses in all, want %d", n, st.wantParses)
			}
		})
	}
	// Once a revision is parsed, sessions read its metadata only.
	before := reader.n.Load()
	if _, err := clientConfig(t.Context(), reader, cache, session); !errorsIsConfig(err) {
		t.Fatalf("error %v, want the cached ErrConfig", err)
	}
	if n := reader.n.Load() - before; n != 0 {
		t.Errorf("a parsed revision was read whole %d times, want 0", n)
	}
	// A key the ConfigMap does not have is a configuration error.
	if _, err := clientConfig(t.Context(), reader, cache, scriptedSession("fanout", "other.yaml")); !errorsIsConfig(err) {
		t.Errorf("missing key: %v, want ErrConfig", err)
	}
}

// TestScriptCacheIsBounded: the cache keeps the last max revisions used of
// real ConfigMaps; an evicted one is read and parsed again.
func TestScriptCacheIsBounded(t *testing.T) {
	api := apiClient(t)
	for _, name := range []string{"a", "b", "c"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Data: map[string]string{"script.yaml": "turns:\n- text: " + name + "\n"}}
		if err := api.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	c := newScriptCache(2)
	steps := []struct {
		cm         string
		wantParses int64
	}{
		{"a", 1}, {"b", 2}, {"a", 2}, // a is the most recent again
		{"c", 3},           // evicts b
		{"a", 3}, {"b", 4}, // b was evicted
	}
	for i, st := range steps {
		s, err := c.script(t.Context(), api, "default", st.cm, "script.yaml")
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.cm, err)
		}
		if got := s.Turns[0].Text; got != st.cm {
			t.Errorf("step %d: script says %q, want %q", i, got, st.cm)
		}
		if n := c.parses.Load(); n != st.wantParses {
			t.Errorf("step %d (%s): %d parses, want %d", i, st.cm, n, st.wantParses)
		}
	}
	if n := c.lru.Len(); n != 2 {
		t.Errorf("%d entries, want 2", n)
	}
}

// Against a real API server, sessions of a parsed revision read the
// ConfigMap's metadata only; a new revision is read whole and parsed again.
func TestScriptCacheAgainstAPIServer(t *testing.T) {
	api := apiClient(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fanout"},
		Data: map[string]string{"script.yaml": "turns:\n- text: one\n"}}
	if err := api.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	reader := &fullReads{Reader: api}
	cache := newScriptCache(DefaultScriptCacheSize)
	session := scriptedSession("fanout", "")
	steps := []struct {
		name       string
		update     string
		wantText   string
		wantParses int64
		wantFull   int32
	}{
		{"first session", "", "one", 1, 1},
		{"second session of the revision", "", "one", 1, 1},
		{"new revision", "turns:\n- text: two\n", "two", 2, 2},
		{"another session of it", "", "two", 2, 2},
	}
	for _, st := range steps {
		if st.update != "" {
			cm.Data["script.yaml"] = st.update
			if err := api.Update(t.Context(), cm); err != nil {
				t.Fatal(err)
			}
		}
		cc, err := clientConfig(t.Context(), reader, cache, session)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := cc.Script.Turns[0].Text; got != st.wantText {
			t.Errorf("%s: script says %q, want %q", st.name, got, st.wantText)
		}
		if p, f := cache.parses.Load(), reader.n.Load(); p != st.wantParses || f != st.wantFull {
			t.Errorf("%s: %d parses and %d whole reads, want %d and %d", st.name, p, f, st.wantParses, st.wantFull)
		}
	}
}
