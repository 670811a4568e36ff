package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

// countParses makes c count its parses.
func countParses(c *scriptCache) *atomic.Int32 {
	var n atomic.Int32
	c.parse = func(b []byte) (*scripted.Script, error) {
		n.Add(1)
		return scripted.Parse(b)
	}
	return &n
}

// configMapReader serves one ConfigMap like an API server's reader would:
// whole, or its metadata alone (PartialObjectMetadata), counting whole
// reads. update writes a new revision.
type configMapReader struct {
	mu   sync.Mutex
	cm   *corev1.ConfigMap
	rv   int
	full atomic.Int32
}

func (r *configMapReader) update(data map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rv++
	r.cm = r.cm.DeepCopy()
	r.cm.Data = data
	r.cm.ResourceVersion = strconv.Itoa(r.rv)
}

func (r *configMapReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if key.Namespace != r.cm.Namespace || key.Name != r.cm.Name {
		return apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		r.full.Add(1)
		r.cm.DeepCopyInto(o)
	case *metav1.PartialObjectMetadata:
		r.cm.ObjectMeta.DeepCopyInto(&o.ObjectMeta)
	default:
		return fmt.Errorf("unexpected read of a %T", obj)
	}
	return nil
}

func (r *configMapReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("unexpected list")
}

// TestScriptCacheParsesOncePerRevision runs clientConfig for many sessions
// naming one script ConfigMap: one revision is parsed once, whatever the
// concurrency; a new revision is parsed again; a broken revision fails
// every session with ErrConfig; a revision parsed is not read whole again.
func TestScriptCacheParsesOncePerRevision(t *testing.T) {
	reader := &configMapReader{cm: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fanout", UID: "cm-uid"}}}
	reader.update(map[string]string{"script.yaml": "turns:\n- text: one\n"})
	cache := newScriptCache(DefaultScriptCacheSize)
	parses := countParses(cache)
	session := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "child"},
		Spec: agentsv1.AgentSessionSpec{Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
			ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "fanout"}}}}

	steps := []struct {
		name       string
		data       string // the script written before the sessions start; "" keeps it
		sessions   int
		wantParses int32
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
				reader.update(map[string]string{"script.yaml": st.data})
			}
			var wg sync.WaitGroup
			errs := make(chan error, st.sessions)
			for range st.sessions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cc, err := clientConfig(t.Context(), reader, cache, session)
					switch {
					case st.wantText == "" && !errorsIsConfig(err):
						errs <- fmt.Errorf("error %v, want ErrConfig", err)
					case st.wantText != "" && err != nil:
						errs <- err
					case st.wantText != "" && cc.Script.Turns[0].Text != st.wantText:
						errs <- fmt.Errorf("script says %q, want %q", cc.Script.Turns[0].Text, st.wantText)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := parses.Load(); n != st.wantParses {
				t.Errorf("%d parses in all, want %d", n, st.wantParses)
			}
		})
	}
	// Once a revision is parsed, sessions read its metadata only.
	before := reader.full.Load()
	if _, err := clientConfig(t.Context(), reader, cache, session); !errorsIsConfig(err) {
		t.Fatalf("error %v, want the cached ErrConfig", err)
	}
	if n := reader.full.Load() - before; n != 0 {
		t.Errorf("a parsed revision was read whole %d times, want 0", n)
	}
}

// TestScriptCacheIsBounded: the cache keeps its last max revisions; an
// evicted one is parsed again.
func TestScriptCacheIsBounded(t *testing.T) {
	c := newScriptCache(2)
	parses := countParses(c)
	key := func(rv string) scriptKey {
		return scriptKey{namespace: "default", name: "s", key: "script.yaml", uid: "u", resourceVersion: rv}
	}
	steps := []struct {
		rv         string
		wantParses int32
	}{
		{"1", 1}, {"2", 2}, {"1", 2}, // 1 is the most recent again
		{"3", 3},           // evicts 2
		{"1", 3}, {"2", 4}, // 2 was evicted
	}
	for i, st := range steps {
		if _, err := c.get(t.Context(), key(st.rv), "turns:\n- text: x\n"); err != nil {
			t.Fatal(err)
		}
		if n := parses.Load(); n != st.wantParses {
			t.Errorf("step %d (revision %s): %d parses, want %d", i, st.rv, n, st.wantParses)
		}
	}
	if n := c.lru.Len(); n != 2 {
		t.Errorf("%d entries, want 2", n)
	}
}

func errorsIsConfig(err error) bool { return err != nil && errors.Is(err, ErrConfig) }

// A ConfigMap without a resourceVersion (not served by an API server) has
// no revision to cache by: every session parses it, and each still works.
func TestScriptWithoutRevisionIsNotCached(t *testing.T) {
	reader := &configMapReader{cm: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain"},
		Data: map[string]string{"s.yaml": "turns:\n- text: plain\n"}}}
	cache := newScriptCache(DefaultScriptCacheSize)
	parses := countParses(cache)
	for i := range 3 {
		s, err := cache.script(t.Context(), reader, "default", "plain", "s.yaml")
		if err != nil || s.Turns[0].Text != "plain" {
			t.Fatalf("session %d: script %+v, %v", i, s, err)
		}
	}
	if n := parses.Load(); n != 3 {
		t.Errorf("%d parses for 3 sessions, want 3", n)
	}
	if _, err := cache.script(t.Context(), reader, "default", "plain", "other.yaml"); !errorsIsConfig(err) {
		t.Errorf("missing key: %v, want ErrConfig", err)
	}
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

// Against a real API server, sessions of a parsed revision read the
// ConfigMap's metadata only; a new revision is read whole and parsed again.
func TestScriptCacheAgainstAPIServer(t *testing.T) {
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	api, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fanout"},
		Data: map[string]string{"script.yaml": "turns:\n- text: one\n"}}
	if err := api.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	reader := &fullReads{Reader: api}
	cache := newScriptCache(DefaultScriptCacheSize)
	parses := countParses(cache)
	session := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "child"},
		Spec: agentsv1.AgentSessionSpec{Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
			ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "fanout"}}}}
	steps := []struct {
		name                 string
		update               string
		wantText             string
		wantParses, wantFull int32
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
		if p, f := parses.Load(), reader.n.Load(); p != st.wantParses || f != st.wantFull {
			t.Errorf("%s: %d parses and %d whole reads, want %d and %d", st.name, p, f, st.wantParses, st.wantFull)
		}
	}
}
