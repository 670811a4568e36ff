package k8senv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/agent-operator/agent-operator/internal/executor"
)

// spare is a stream opened without an owner to a pod no session uses yet
// (a warm pool pod), kept for the first stream opened to the pod: it becomes
// the pod's shared stream instead of paying for a new exec and executor
// start.
type spare struct {
	target Target           // what it was opened for (no owner)
	client *executor.Client // nil while Preopen opens it
	// claimed is the pod as the update that claimed it returned it
	// (Claimed), nil until then.
	claimed *corev1.Pod
}

func (sp *spare) close() {
	if sp.client != nil {
		sp.client.Close()
	}
}

func spareKey(namespace, pod string) string { return namespace + "/" + pod }

// Preopen opens a spare stream to t's pod, without an owner (t.Owner is
// ignored), unless the pod has one already (open or opening): a pod has at
// most one spare. The first time the pod's shared stream (with the same
// container) is opened, it takes the spare over: the pod is read and checked
// against the Expect of the session opening it, one round trip shows the
// spare alive, and the spare becomes the stream every session of the pod
// shares (each call carrying its session's owner, see Pool.Env); on any
// failure the spare is closed and a new stream is opened as usual. A spare
// is taken over once only. A spare whose stream ends is dropped and not
// reopened; DropSpare, Release and Close close it. The pod is checked
// against t.Expect before the spare is opened. Opening a spare is not
// reported to Config.OnOpen.
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

// Claimed records pod, as the update that claimed it for a session
// returned it, with the pod's spare stream: the spare's take-over checks
// this copy against the session's expectations instead of reading the pod
// again (it is the API server's own answer to the claim, the newest write
// this process knows of). Without a spare it does nothing.
func (p *Pool) Claimed(pod *corev1.Pod) {
	key := spareKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.spares[key]; sp != nil {
		sp.claimed = pod.DeepCopy()
	}
}

// takeSpare removes the spare of t's pod from the pool and returns its
// client and the pod its claim recorded (or nil), or a nil client when
// there is no open spare for t's container. Whatever the answer, the pod
// has no spare afterwards: a spare still opening is closed once it opened,
// since t's stream replaces it.
func (p *Pool) takeSpare(t Target) (*executor.Client, *corev1.Pod) {
	key := spareKey(t.Namespace, t.Pod)
	p.mu.Lock()
	sp := p.spares[key]
	delete(p.spares, key)
	p.mu.Unlock()
	switch {
	case sp == nil:
		return nil, nil
	case sp.client == nil:
		return nil, nil
	case sp.target.Container != t.Container:
		sp.close()
		return nil, nil
	}
	return sp.client, sp.claimed
}

// takeOverSpare returns the pod's spare stream made the stream of t (the
// pod's shared stream, without an owner): the pod (its claim's copy, or
// else read again) is checked against t and one round trip shows the spare
// alive. It returns nil, having closed the spare, when there is none or it
// cannot be used; the caller then opens a new stream.
func (p *Pool) takeOverSpare(ctx context.Context, t Target) *executor.Client {
	c, claimed := p.takeSpare(t)
	if c == nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	start := time.Now()
	var err error
	if claimed != nil {
		_, err = checkPod(claimed, t)
	} else {
		_, err = p.checkPod(dctx, t)
	}
	if err != nil {
		c.Close()
		p.cfg.Log.V(1).Info("spare exec stream not used: pod check failed", "pod", t.key(), "error", err.Error())
		return nil
	}
	checked := time.Now()
	// A call without an owner, which runs nothing in the workspace: the
	// sessions' calls carry their own owners.
	if _, err := c.FileExists(dctx, "."); err != nil {
		c.Close()
		p.cfg.Log.V(1).Info("spare exec stream not used: it does not answer", "pod", t.key(), "error", err.Error())
		return nil
	}
	if f := p.cfg.OnOpen; f != nil {
		f(StagePodCheck, checked.Sub(start))
		f(StageSpare, time.Since(checked))
	}
	p.cfg.Log.V(1).Info("spare exec stream taken over", "pod", t.key())
	return c
}
