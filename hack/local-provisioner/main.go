// Command local-provisioner is the dynamic volume provisioner of the local single-node cluster
// (hack/cluster.sh), so PersistentVolumeClaims bind the way they do on kind or a cloud.
//
// For every pending claim of a StorageClass whose provisioner is -provisioner, it creates a
// directory under -dir (mode 0777, so pods of any user can write) and a hostPath
// PersistentVolume pre-bound to the claim. When a volume it made is released and its reclaim
// policy is Delete, it removes the directory and the volume. It runs on the host next to the
// kubelet, like the other daemons of the cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

const (
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
	annSelectedNode  = "volume.kubernetes.io/selected-node"
	resync           = 30 * time.Second
)

type provisioner struct {
	name   string
	dir    string
	client kubernetes.Interface
	pvcs   corelisters.PersistentVolumeClaimLister
	pvs    corelisters.PersistentVolumeLister
	scs    storagelisters.StorageClassLister
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	dir := flag.String("dir", "", "directory that holds the volumes")
	name := flag.String("provisioner", "agent-operator.dev/local-path", "provisioner name in StorageClasses")
	flag.Parse()
	if *kubeconfig == "" || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: local-provisioner -kubeconfig FILE -dir DIR [-provisioner NAME]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *kubeconfig, *dir, *name); err != nil {
		klog.ErrorS(err, "local-provisioner failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, dir, name string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", abs, err)
	}

	factory := informers.NewSharedInformerFactory(client, resync)
	pvcInf := factory.Core().V1().PersistentVolumeClaims()
	pvInf := factory.Core().V1().PersistentVolumes()
	scInf := factory.Storage().V1().StorageClasses()
	kick := make(chan struct{}, 1)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signalKick(kick) },
		UpdateFunc: func(any, any) { signalKick(kick) },
		DeleteFunc: func(any) { signalKick(kick) },
	}
	for _, inf := range []cache.SharedIndexInformer{pvcInf.Informer(), pvInf.Informer(), scInf.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("add event handler: %w", err)
		}
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("sync informer cache of %v", typ)
		}
	}
	p := &provisioner{
		name:   name,
		dir:    abs,
		client: client,
		pvcs:   pvcInf.Lister(),
		pvs:    pvInf.Lister(),
		scs:    scInf.Lister(),
	}
	klog.InfoS("local-provisioner running", "provisioner", name, "dir", abs)
	tick := time.NewTicker(resync)
	defer tick.Stop()
	for {
		p.reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-tick.C:
		}
	}
}

func signalKick(kick chan<- struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}

// reconcile provisions every pending claim of our classes and deletes released volumes.
func (p *provisioner) reconcile(ctx context.Context) {
	pvcs, _ := p.pvcs.List(labels.Everything())
	for _, pvc := range pvcs {
		if err := p.provision(ctx, pvc); err != nil {
			klog.ErrorS(err, "provision", "claim", klog.KObj(pvc))
		}
	}
	pvs, _ := p.pvs.List(labels.Everything())
	for _, pv := range pvs {
		if err := p.reclaim(ctx, pv); err != nil {
			klog.ErrorS(err, "delete volume", "volume", pv.Name)
		}
	}
}

func (p *provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil {
		return nil
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil
	}
	sc, err := p.scs.Get(*pvc.Spec.StorageClassName)
	if err != nil {
		return nil // not a class (yet); the claim stays pending
	}
	if sc.Provisioner != p.name {
		return nil
	}
	if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer && pvc.Annotations[annSelectedNode] == "" {
		return nil // wait until the scheduler picked the node
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		return fmt.Errorf("block volumes are not supported")
	}
	name := "pvc-" + string(pvc.UID)
	if _, err := p.pvs.Get(name); err == nil {
		return nil // made already; the PV controller binds it
	}
	path := filepath.Join(p.dir, name)
	if err := os.MkdirAll(path, 0o777); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	// MkdirAll applies the umask; every user of the pod must be able to write.
	if err := os.Chmod(path, 0o777); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		reclaim = *sc.ReclaimPolicy
	}
	hostPathType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: p.name}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              sc.Name,
			MountOptions:                  sc.MountOptions,
			ClaimRef: &corev1.ObjectReference{
				APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &hostPathType},
			},
		},
	}
	if _, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	klog.InfoS("provisioned", "claim", klog.KObj(pvc), "volume", name, "path", path)
	return nil
}

func (p *provisioner) reclaim(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Annotations[annProvisionedBy] != p.name || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	if pv.DeletionTimestamp != nil {
		return nil
	}
	if pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
		return nil
	}
	if hp := pv.Spec.HostPath; hp != nil {
		path := filepath.Clean(hp.Path)
		if !strings.HasPrefix(path, p.dir+string(filepath.Separator)) {
			return fmt.Errorf("volume %s points at %s, outside %s: not deleting it", pv.Name, path, p.dir)
		}
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("remove %s: %w", path, err)
		}
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete volume %s: %w", pv.Name, err)
	}
	if err == nil {
		klog.InfoS("deleted released volume", "volume", pv.Name)
	}
	return nil
}
