package framework

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Label put on every namespace the suite creates, so leftovers are easy to find and delete:
// kubectl delete ns -l agent-operator.dev/e2e=true
const E2ELabel = "agent-operator.dev/e2e"

// Framework bundles the clients of one cluster.
type Framework struct {
	// Config is the REST config loaded from KUBECONFIG (or ~/.kube/config).
	Config *rest.Config
	// Clientset is the typed client-go clientset.
	Clientset kubernetes.Interface
	// Client is a controller-runtime client using Scheme.
	Client client.Client
	// Scheme holds the client-go types; add the operator's API types with AddToScheme.
	Scheme *runtime.Scheme
}

// New connects to the cluster named by KUBECONFIG (the usual kubectl loading rules apply)
// and checks that the API server answers.
func New(ctx context.Context) (*Framework, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig (KUBECONFIG=%q): %w", os.Getenv("KUBECONFIG"), err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create clientset: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	cw, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create controller-runtime client: %w", err)
	}
	c := WithSessionClass(cw, scheme)
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("reach API server %s: %w", cfg.Host, err)
	}
	_ = ctx
	return &Framework{Config: cfg, Clientset: cs, Client: c, Scheme: scheme}, nil
}

// CreateNamespace creates a uniquely named namespace "<prefix>-xxxxx" labelled with E2ELabel.
func (f *Framework) CreateNamespace(ctx context.Context, prefix string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: prefix + "-",
		Labels:       map[string]string{E2ELabel: "true"},
	}}
	created, err := f.Clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create namespace %s-*: %w", prefix, err)
	}
	// Pods need the namespace's default ServiceAccount, which the controller-manager creates.
	if err := f.WaitFor(ctx, DefaultTimeout, "default ServiceAccount in "+created.Name, func(ctx context.Context) (bool, error) {
		_, err := f.Clientset.CoreV1().ServiceAccounts(created.Name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return nil, err
	}
	return created, nil
}

// DeleteNamespace starts deleting a namespace and does not wait: namespace deletion takes
// seconds even when the namespace is nearly empty.
func (f *Framework) DeleteNamespace(ctx context.Context, name string) error {
	err := f.Clientset.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return nil
}
