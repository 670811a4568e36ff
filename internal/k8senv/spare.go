package k8senv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agent-operator/agent-operator/internal/executor"
)

// spare is a stream opened without an owner to a pod no session uses yet
// (a warm pool pod), kept for the first session that opens a stream to the
// pod: it adopts the session's owner instead of paying for a new exec and
// executor start.
type spare struct {
	target Target           // what it was opened for (no owner)
	client *executor.Client // nil while Preopen opens it
}

func (sp *spare) close() {
	if sp.client != nil {
		sp.client.Close()
	}
}

func spareKey(namespace, pod string) string { return namespace + "/" + pod }

// Preopen opens a spare stream to t's pod, without an owner (t.Owner is
// ignored), unless the pod has one already (open or opening): a pod has at
// most one spare. The first stream a session opens to the pod (with the same
// container) takes the spare over: the pod is read and checked against the
// session's Expect, the spare adopts the session's owner
// (executor.Client.AdoptOwner, checked by the sidecar like a hello carrying
// it) and becomes the session's stream; on any failure the spare is closed
// and a new stream is opened as usual. A spare is handed to one session
// only. A spare whose stream ends is dropped and not reopened; DropSpare,
// Release and Close close it. The pod is checked against t.Expect before
// the spare is opened. Opening a spare is not reported to Config.OnOpen.
// Only targets with an Owner take a spare over: the adoption is also the
// round trip that shows the spare is alive.
func (p *Pool) Preopen(ctx context.Context, t Target) error {
	if p.cfg.Mode != Persistent {
		return nil
	}
	t.Owner = executor.Owner{}
	key := spareKey(t.Namespace, t.Pod)
	sp := &spare{target: t}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("preopen %s: %w", t.key(), executor.ErrStreamClosed)
	}
	if p.spares[key] != nil {
		p.mu.Unlock()
		return nil
	}
	p.spares[key] = sp
	p.mu.Unlock()

	c, _, err := p.dial(ctx, t)
	p.mu.Lock()
	if err != nil {
		if p.spares[key] == sp {
			delete(p.spares, key)
		}
		p.mu.Unlock()
		return fmt.Errorf("preopen %s: %w", t.key(), err)
	}
	if p.spares[key] != sp {
		// Dropped or taken while it opened: nobody will use it.
		p.mu.Unlock()
		c.Close()
		return nil
	}
	sp.client = c
	p.mu.Unlock()
	p.cfg.Log.V(1).Info("spare exec stream opened", "pod", t.key())
	go func() {
		<-c.Done()
		p.mu.Lock()
		if p.spares[key] == sp {
			delete(p.spares, key)
		}
		p.mu.Unlock()
	}()
	return nil
}

// DropSpare closes the spare stream of a pod, if it has one (e.g. when the
// pod is deleted). A spare still opening is closed once it opened.
func (p *Pool) DropSpare(namespace, pod string) {
	key := spareKey(namespace, pod)
	p.mu.Lock()
	sp := p.spares[key]
	delete(p.spares, key)
	p.mu.Unlock()
	if sp != nil {
		sp.close()
	}
}

// takeSpare removes the spare of t's pod from the pool and returns its
// client, or nil when there is no open spare for t's container. Whatever
// the answer, the pod has no spare afterwards: a spare still opening is
// closed once it opened, since t's stream replaces it.
func (p *Pool) takeSpare(t Target) *executor.Client {
	key := spareKey(t.Namespace, t.Pod)
	p.mu.Lock()
	sp := p.spares[key]
	delete(p.spares, key)
	p.mu.Unlock()
	switch {
	case sp == nil:
		return nil
	case sp.client == nil:
		return nil
	case sp.target.Container != t.Container:
		sp.close()
		return nil
	}
	return sp.client
}

// adoptSpare returns the pod's spare stream made t's stream: the pod is
// checked against t and the spare adopts t's owner. It returns nil, having
// closed the spare, when there is none or it cannot be used; the caller then
// opens a new stream.
func (p *Pool) adoptSpare(ctx context.Context, t Target) *executor.Client {
	if t.Owner.IsZero() {
		// Only adopting proves the spare alive before it is handed out.
		return nil
	}
	c := p.takeSpare(t)
	if c == nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	start := time.Now()
	if _, err := p.checkPod(dctx, t); err != nil {
		c.Close()
		p.cfg.Log.V(1).Info("spare exec stream not used: pod check failed", "pod", t.key(), "error", err.Error())
		return nil
	}
	checked := time.Now()
	if err := c.Err(); err != nil {
		p.cfg.Log.V(1).Info("spare exec stream not used: it ended", "pod", t.key(), "error", err.Error())
		return nil
	}
	if err := c.AdoptOwner(dctx, t.Owner); err != nil {
		c.Close()
		level := 1
		if errors.Is(err, executor.ErrAdoptUnsupported) {
			level = 0 // every claimed pod pays for the old executor image
		}
		p.cfg.Log.V(level).Info("spare exec stream not used: adopting the owner failed", "pod", t.key(), "error", err.Error())
		return nil
	}
	if f := p.cfg.OnOpen; f != nil {
		f(StagePodCheck, checked.Sub(start))
		f(StageAdopt, time.Since(checked))
	}
	p.cfg.Log.V(1).Info("spare exec stream adopted", "pod", t.key())
	return c
}
