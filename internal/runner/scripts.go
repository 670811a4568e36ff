package runner

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

// DefaultScriptCacheSize is how many parsed scripts a Runner keeps.
const DefaultScriptCacheSize = 64

// scriptKey is one revision of one key of a script ConfigMap.
type scriptKey struct {
	namespace, name, key string
	uid                  types.UID
	resourceVersion      string
}

// scriptCache keeps the parsed scripts of the last revisions of script
// ConfigMaps used, so that the sessions of one revision (a fan-out's
// children) share one parse instead of each holding its own copy. A
// *scripted.Script is read-only once parsed (a scripted.Client keeps its
// per-session state, the failures served, itself), so sessions share it.
// It is safe for concurrent use.
type scriptCache struct {
	max    int
	parses atomic.Int64 // revisions parsed so far

	mu      sync.Mutex
	entries map[scriptKey]*list.Element // of *scriptEntry
	lru     *list.List                  // most recently used first
}

// scriptEntry is one revision's parse; ready is closed when script and err
// are set.
type scriptEntry struct {
	key    scriptKey
	ready  chan struct{}
	script *scripted.Script
	err    error
}

func newScriptCache(max int) *scriptCache {
	if max <= 0 {
		max = DefaultScriptCacheSize
	}
	return &scriptCache{max: max, entries: map[scriptKey]*list.Element{}, lru: list.New()}
}

// lookup returns the entry of key, parsed or being parsed, or nil.
func (c *scriptCache) lookup(key scriptKey) *scriptEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*scriptEntry)
}

// wait returns e's parse once it is done, or ctx's error.
func (e *scriptEntry) wait(ctx context.Context) (*scripted.Script, error) {
	select {
	case <-e.ready:
		return e.script, e.err
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the script's parse: %w", ctx.Err())
	}
}

// get returns the parse of data, the content of key: the cached one, or
// one parse shared by every concurrent caller of the same key. A revision's
// parse error is kept too (the same bytes fail the same way).
func (c *scriptCache) get(ctx context.Context, key scriptKey, data string) (*scripted.Script, error) {
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return el.Value.(*scriptEntry).wait(ctx)
	}
	e := &scriptEntry{key: key, ready: make(chan struct{})}
	c.entries[key] = c.lru.PushFront(e)
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(*scriptEntry).key)
	}
	c.mu.Unlock()
	c.parses.Add(1)
	e.script, e.err = scripted.Parse([]byte(data))
	close(e.ready)
	return e.script, e.err
}

// script returns the parsed script in key of the ConfigMap name of
// namespace. It first reads the ConfigMap's metadata only: a revision
// already parsed (or being parsed) is neither downloaded nor parsed again. A reader that
// cannot read metadata alone gets the whole ConfigMap read.
func (c *scriptCache) script(ctx context.Context, reader client.Reader, namespace, name, key string) (*scripted.Script, error) {
	nn := types.NamespacedName{Namespace: namespace, Name: name}
	var meta metav1.PartialObjectMetadata
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := reader.Get(ctx, nn, &meta); err == nil {
		k := scriptKey{namespace: namespace, name: name, key: key, uid: meta.UID, resourceVersion: meta.ResourceVersion}
		if e := c.lookup(k); e != nil { // parsed, or being parsed for another session
			script, err := e.wait(ctx)
			return parsed(name, script, err)
		}
	}
	var cm corev1.ConfigMap
	if err := reader.Get(ctx, nn, &cm); err != nil {
		return nil, fmt.Errorf("%w: get script configmap %s: %w", ErrConfig, name, err)
	}
	data, ok := cm.Data[key]
	if !ok {
		return nil, fmt.Errorf("%w: configmap %s has no key %q", ErrConfig, name, key)
	}
	k := scriptKey{namespace: namespace, name: name, key: key, uid: cm.UID, resourceVersion: cm.ResourceVersion}
	script, err := c.get(ctx, k, data)
	return parsed(name, script, err)
}

// parsed wraps the parse error of the script of ConfigMap name.
func parsed(name string, s *scripted.Script, err error) (*scripted.Script, error) {
	if err != nil {
		return nil, fmt.Errorf("%w: configmap %s: %w", ErrConfig, name, err)
	}
	return s, nil
}
