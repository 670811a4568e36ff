package agentsession

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/metrics"
	"github.com/agent-operator/agent-operator/internal/runner"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

// The suite runs a real kube-apiserver and etcd (envtest) with the real CRDs. The binaries
// are found through KUBEBUILDER_ASSETS or TEST_ASSET_KUBE_APISERVER/TEST_ASSET_ETCD, else in
// the cache that hack/build-k8s.sh fills (${XDG_CACHE_HOME:-~/.cache}/agent-operator).
// envtest has no kubelet: pods never run, so the tests that need a running workspace use a
// LocalExecutionEnvironment in a temporary directory instead of k8senv (see envFactory).
var (
	testCfg    *rest.Config
	testClient client.Client
	testJS     *events.Publisher
	workspaces = &workspaceDirs{dirs: map[string]string{}}
)

// workspaceDirs hands out one temporary directory per session: the
// LocalExecutionEnvironment the runner uses in envtest instead of k8senv.
type workspaceDirs struct {
	base string
	mu   sync.Mutex
	dirs map[string]string
}

func (w *workspaceDirs) dir(s *agentsv1.AgentSession) (string, error) {
	_, uid := runner.WorkspaceOwner(s) // children in a shared workspace use their parent's
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.dirs[string(uid)]; ok {
		return d, nil
	}
	d := filepath.Join(w.base, string(uid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	w.dirs[string(uid)] = d
	return d, nil
}

func (w *workspaceDirs) envFactory(_ context.Context, s *agentsv1.AgentSession, _ string, _ runner.Driver) (tool.ExecutionEnvironment, error) {
	d, err := w.dir(s)
	if err != nil {
		return nil, err
	}
	return localenv.New(d)
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()
	if err := agentsv1.AddToScheme(scheme.Scheme); err != nil {
		fmt.Fprintf(os.Stderr, "add scheme: %v\n", err)
		return 1
	}
	testCfg = cfg
	testClient, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "new client: %v\n", err)
		return 1
	}
	stop, err := startManager(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	return m.Run()
}

// suiteInstance is who the suite's manager is in session claims.
var suiteInstance = claim.Holder{Install: "suite/agent-operator", Pod: "suite-0"}

// testRunner is the suite manager's runner.
var testRunner *runner.Runner

// startManager runs the real reconciler and runner against envtest, with an
// embedded NATS server (the real journal) and local workspaces.
func startManager(cfg *rest.Config) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	tmp, err := os.MkdirTemp("", "agentsession-suite-")
	if err != nil {
		cancel()
		return nil, err
	}
	workspaces.base = filepath.Join(tmp, "workspaces")
	nsrv, err := events.StartEmbedded(ctx, events.EmbeddedOptions{StoreDir: filepath.Join(tmp, "nats")})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start nats: %w", err)
	}
	nc, err := nsrv.Connect()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	pub, err := events.NewPublisher(nc, events.PublisherOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	if err := pub.EnsureStream(ctx); err != nil {
		cancel()
		return nil, err
	}
	testJS = pub
	log := logr.Discard()
	if os.Getenv("TEST_VERBOSE_MANAGER") != "" {
		log = textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(4)))
	}
	ctrl.SetLogger(log)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   CacheOptions(), // as the manager's, so a pod it cannot see fails here too
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("new manager: %w", err)
	}
	rec := NewReconciler()
	rec.Claims = &claim.Claims{Client: mgr.GetClient(), Reader: mgr.GetClient(), Me: suiteInstance}
	run, err := runner.New(runner.Options{
		Claims:    &claim.Claims{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Me: suiteInstance},
		Reader:    mgr.GetAPIReader(),
		Journals:  pub,
		Clients:   runner.ProviderClients,
		Envs:      workspaces.envFactory,
		Client:    mgr.GetClient(),
		Informers: mgr.GetCache(),
		Notify:    rec.Notify,
		Log:       log,
		Prices:    suitePrices,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	suiteMetrics, err = metrics.New(suiteRegistry, suitePrices)
	if err != nil {
		cancel()
		return nil, err
	}
	rec.Metrics = suiteMetrics
	rec.Client = mgr.GetClient()
	rec.APIReader = mgr.GetAPIReader()
	rec.Scheme = mgr.GetScheme()
	rec.Recorder = mgr.GetEventRecorder("agent-operator")
	suiteRecorder = rec.Recorder
	rec.Runner = run
	testRunner = run
	rec.Images = suiteImages
	rec.WarmPools = []WarmPool{{Namespace: warmPoolNamespace, Size: warmPoolSize}}
	rec.AdmissionWorkers = 2 // first statuses by their own controller, as in the manager
	if err := rec.SetupWithManager(mgr); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		_ = run.Shutdown(context.Background())
		cancel()
		<-done
		nc.Close()
		nsrv.Shutdown()
		_ = os.RemoveAll(tmp)
	}, nil
}
