package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultTimeout bounds the waits of this package unless a caller passes its own.
const DefaultTimeout = 2 * time.Minute

const pollInterval = 250 * time.Millisecond

// WaitFor polls cond until it reports true, returns an error, or timeout passes; the error
// names what was awaited.
func (f *Framework) WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, cond); err != nil {
		return fmt.Errorf("wait for %s (timeout %s): %w", what, timeout, err)
	}
	return nil
}

// Waiting reasons after which a pod will not become Running without outside help.
var fatalWaitingReasons = map[string]bool{
	"ErrImageNeverPull": true, "InvalidImageName": true, "CreateContainerConfigError": true,
	"CreateContainerError": true, "CrashLoopBackOff": true, "ImagePullBackOff": true, "ErrImagePull": true,
}

// WaitForPodRunning waits until every container of the pod is running and ready, and fails
// early with the reason when the pod cannot get there (failed, image missing, crash loop).
func (f *Framework) WaitForPodRunning(ctx context.Context, namespace, name string, timeout time.Duration) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := f.WaitFor(ctx, timeout, fmt.Sprintf("pod %s/%s Running", namespace, name), func(ctx context.Context) (bool, error) {
		p, err := f.Clientset.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		pod = p
		switch p.Status.Phase {
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("pod %s/%s is %s: %s %s", namespace, name, p.Status.Phase, p.Status.Reason, p.Status.Message)
		case corev1.PodRunning:
		default:
			return false, podStuck(p)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !cs.Ready {
				return false, podStuck(p)
			}
		}
		return true, nil
	})
	return pod, err
}

func podStuck(p *corev1.Pod) error {
	var reasons []string
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && fatalWaitingReasons[w.Reason] {
			reasons = append(reasons, fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message))
		}
	}
	if len(reasons) > 0 {
		return fmt.Errorf("pod %s/%s cannot start: %s", p.Namespace, p.Name, strings.Join(reasons, "; "))
	}
	return nil
}

// WaitForGone waits until obj (namespace and name set) no longer exists.
func (f *Framework) WaitForGone(ctx context.Context, obj client.Object, timeout time.Duration) error {
	key := client.ObjectKeyFromObject(obj)
	what := fmt.Sprintf("%T %s to be deleted", obj, key)
	return f.WaitFor(ctx, timeout, what, func(ctx context.Context) (bool, error) {
		err := f.Client.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
