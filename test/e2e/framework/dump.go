package framework

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DumpNamespace writes the state of every pod in the namespace, the last lines of each
// container's log (and of its previous instance after a restart) and the namespace's events
// in time order. Call it when a spec fails.
func (f *Framework) DumpNamespace(ctx context.Context, namespace string, w io.Writer) {
	fmt.Fprintf(w, "\n===== dump of namespace %s =====\n", namespace)
	pods, err := f.Clientset.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(w, "list pods: %v\n", err)
	} else {
		for i := range pods.Items {
			f.dumpPod(ctx, &pods.Items[i], w)
		}
	}
	events, err := f.Clientset.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(w, "list events: %v\n", err)
		return
	}
	items := events.Items
	sort.SliceStable(items, func(i, j int) bool { return eventTime(&items[i]).Time.Before(eventTime(&items[j]).Time) })
	fmt.Fprintf(w, "--- events (%d)\n", len(items))
	for i := range items {
		e := &items[i]
		fmt.Fprintf(w, "%s %-7s %-22s %s/%s: %s (x%d)\n", eventTime(e).Format("15:04:05.000"), e.Type, e.Reason,
			strings.ToLower(e.InvolvedObject.Kind), e.InvolvedObject.Name, strings.TrimSpace(e.Message), max(e.Count, 1))
	}
	fmt.Fprintf(w, "===== end of dump of namespace %s =====\n", namespace)
}

func (f *Framework) dumpPod(ctx context.Context, p *corev1.Pod, w io.Writer) {
	fmt.Fprintf(w, "--- pod %s: phase=%s node=%s ip=%s reason=%q message=%q\n", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.PodIP, p.Status.Reason, p.Status.Message)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(w, "    condition %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		fmt.Fprintf(w, "    container %s: ready=%t restarts=%d state=%s\n", cs.Name, cs.Ready, cs.RestartCount, stateString(cs.State))
		f.dumpLog(ctx, p, cs.Name, false, w)
		if cs.RestartCount > 0 {
			f.dumpLog(ctx, p, cs.Name, true, w)
		}
	}
}

func (f *Framework) dumpLog(ctx context.Context, p *corev1.Pod, container string, previous bool, w io.Writer) {
	tail := int64(200)
	b, err := f.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{
		Container: container, Previous: previous, TailLines: &tail,
	}).DoRaw(ctx)
	which := "log"
	if previous {
		which = "previous log"
	}
	if err != nil {
		fmt.Fprintf(w, "    (%s of %s unavailable: %v)\n", which, container, err)
		return
	}
	fmt.Fprintf(w, "    --- %s of %s (last %d lines)\n", which, container, tail)
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Fprintf(w, "    | %s\n", line)
	}
}

func stateString(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.Format("15:04:05")
	case s.Waiting != nil:
		return fmt.Sprintf("waiting %s: %s", s.Waiting.Reason, s.Waiting.Message)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated %s exit=%d: %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "unknown"
}

func eventTime(e *corev1.Event) metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	}
	return e.CreationTimestamp
}
