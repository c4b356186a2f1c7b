// basalt-k8s-validate checks Kubernetes manifests offline, without a cluster: every
// document of every *.yaml (and *.yml) file in the directories given is decoded strictly
// into the typed object of its apiVersion and kind (k8s.io/api, external-snapshotter's
// client): an unknown or misspelled field, a field in the wrong case, a duplicate key, a
// value of the wrong type or a kind it does not know is an error. Then rules an API server
// or a kubelet would only enforce at install time, or never:
//   - names and namespaces: metadata.name set; namespaced objects name a namespace that a
//     Namespace manifest defines; no object defined twice;
//   - pod templates: every container has an image; every volumeMount names a volume of
//     the pod; Bidirectional propagation only in a privileged container; every $(VAR) of
//     command/args is in the container's env; a probe's named port is the container's;
//     the directory of every --csi-address/--endpoint socket is a mounted volume, all
//     containers reach the same socket, and --kubelet-registration-path is where the
//     socket's hostPath volume puts it on the host; the selector matches the template;
//     serviceAccountName names a ServiceAccount of the manifests;
//   - RBAC: rules have verbs and resources; bindings name Roles/ClusterRoles and
//     ServiceAccounts of the manifests;
//   - StorageClass provisioner and VolumeSnapshotClass driver name a CSIDriver of the
//     manifests (when they define one).
//
// Usage: basalt-k8s-validate [-containers] DIR...
//
// It prints one line per object, "ok FILE KIND NAMESPACE/NAME" (or "ok FILE KIND NAME"
// for cluster-scoped objects), the errors on stderr, and exits 1 on any error (2 on a
// usage error). With -containers it also prints, per container of a pod template, a line
// "container {JSON}" (file, object, name, image, command, args), for tests that check
// what the manifests pass to a binary against that binary.
//
// Used by crates/cli/tests/systemd.rs on contrib/kubernetes; installed by
// scripts/install-test-deps.sh as basalt-k8s-validate.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kindInfo says how to make the typed object of one apiVersion/kind and whether it lives
// in a namespace.
type kindInfo struct {
	newObject  func() any
	namespaced bool
}

var kinds = map[string]kindInfo{
	"v1/Namespace":      {func() any { return &corev1.Namespace{} }, false},
	"v1/ServiceAccount": {func() any { return &corev1.ServiceAccount{} }, true},
	"v1/ConfigMap":      {func() any { return &corev1.ConfigMap{} }, true},
	"v1/Secret":         {func() any { return &corev1.Secret{} }, true},
	"v1/Service":        {func() any { return &corev1.Service{} }, true},
	"v1/Pod":            {func() any { return &corev1.Pod{} }, true},

	"apps/v1/Deployment":  {func() any { return &appsv1.Deployment{} }, true},
	"apps/v1/DaemonSet":   {func() any { return &appsv1.DaemonSet{} }, true},
	"apps/v1/StatefulSet": {func() any { return &appsv1.StatefulSet{} }, true},

	"rbac.authorization.k8s.io/v1/ClusterRole":        {func() any { return &rbacv1.ClusterRole{} }, false},
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": {func() any { return &rbacv1.ClusterRoleBinding{} }, false},
	"rbac.authorization.k8s.io/v1/Role":               {func() any { return &rbacv1.Role{} }, true},
	"rbac.authorization.k8s.io/v1/RoleBinding":        {func() any { return &rbacv1.RoleBinding{} }, true},

	"storage.k8s.io/v1/CSIDriver":    {func() any { return &storagev1.CSIDriver{} }, false},
	"storage.k8s.io/v1/StorageClass": {func() any { return &storagev1.StorageClass{} }, false},

	"snapshot.storage.k8s.io/v1/VolumeSnapshotClass": {func() any { return &snapshotv1.VolumeSnapshotClass{} }, false},
}

// object is one decoded document.
type object struct {
	file       string // path as given, for messages
	doc        int    // 1-based document number in the file
	kind       string
	namespaced bool
	meta       *metav1.ObjectMeta
	value      any // pointer to the typed object
	errs       []string
}

func (o *object) id() string {
	if o.namespaced {
		return o.meta.Namespace + "/" + o.meta.Name
	}
	return o.meta.Name
}

func (o *object) fail(format string, args ...any) {
	o.errs = append(o.errs, fmt.Sprintf(format, args...))
}

func main() {
	containers := flag.Bool("containers", false, "also print one JSON line per container of every pod template")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [-containers] DIR...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	var objects []*object
	for _, dir := range flag.Args() {
		objs, errs := readDir(dir)
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, "error", e)
			failed = true
		}
		objects = append(objects, objs...)
	}
	checkObjects(objects)
	for _, o := range objects {
		if len(o.errs) == 0 {
			fmt.Printf("ok %s %s %s\n", o.file, o.kind, o.id())
			continue
		}
		failed = true
		for _, e := range o.errs {
			fmt.Fprintf(os.Stderr, "error %s %s %s: %s\n", o.file, o.kind, o.id(), e)
		}
	}
	if *containers {
		printContainers(objects)
	}
	if failed {
		os.Exit(1)
	}
}

// readDir decodes every document of every YAML file in dir (sorted by name).
func readDir(dir string) ([]*object, []string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []string{err.Error()}
	}
	var objects []*object
	var errs []string
	files := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		files++
		file := filepath.Join(dir, name)
		data, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		docs := splitDocuments(data)
		n := 0
		for i, doc := range docs {
			o, err := decode(file, i+1, doc)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s (document %d): %v", file, i+1, err))
				continue
			}
			if o != nil {
				objects = append(objects, o)
				n++
			}
		}
		if n == 0 && len(errs) == 0 {
			errs = append(errs, file+": no Kubernetes object in it")
		}
	}
	if files == 0 {
		errs = append(errs, dir+": no *.yaml file")
	}
	return objects, errs
}

// documentSeparator is a line "---", optionally followed by spaces or a comment.
var documentSeparator = regexp.MustCompile(`^---\s*(#.*)?$`)

// splitDocuments splits a multi-document YAML stream at its "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if documentSeparator.Match(bytes.TrimRight(line, "\r\n")) {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
			cur.Reset()
			continue
		}
		cur.Write(line)
	}
	return append(docs, cur.Bytes())
}

// decode decodes one document strictly into its typed object; nil, nil for an empty
// document (only comments or blank lines).
func decode(file string, doc int, data []byte) (*object, error) {
	// Duplicate keys and YAML that is not JSON-compatible are errors.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(js); bytes.Equal(t, []byte("null")) || len(t) == 0 {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fmt.Errorf("not an object with apiVersion and kind: %v", err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return nil, fmt.Errorf("apiVersion and kind are required")
	}
	info, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("unknown kind %s %q (the validator knows %s)", tm.APIVersion, tm.Kind, knownKinds())
	}
	value := info.newObject()
	// Unknown fields and wrong types are errors.
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(value); err != nil {
		return nil, fmt.Errorf("%s: %v", tm.Kind, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: trailing data after the object", tm.Kind)
	}
	// encoding/json matches field names case-insensitively (it would take
	// "AllowVolumeExpansion"); the API server does not. sigs.k8s.io/json is the decoder
	// it uses: case-sensitive, strict about unknown and duplicate fields.
	strict, err := k8sjson.UnmarshalStrict(js, info.newObject())
	if err != nil {
		return nil, fmt.Errorf("%s: %v", tm.Kind, err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%s: %s", tm.Kind, strings.Join(msgs, "; "))
	}
	o := &object{file: file, doc: doc, kind: tm.Kind, namespaced: info.namespaced, value: value}
	o.meta = objectMeta(value)
	return o, nil
}

func knownKinds() string {
	var names []string
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// objectMeta returns the metadata of a typed object.
func objectMeta(v any) *metav1.ObjectMeta {
	if m, ok := v.(metav1.Object); ok {
		if acc, ok := m.(interface{ GetObjectMeta() metav1.Object }); ok {
			if om, ok := acc.GetObjectMeta().(*metav1.ObjectMeta); ok {
				return om
			}
		}
	}
	panic(fmt.Sprintf("%T has no ObjectMeta", v))
}

// podSpec returns the pod spec and selector of a workload (nil for other kinds).
func podSpec(o *object) (*corev1.PodSpec, *metav1.LabelSelector, map[string]string) {
	switch v := o.value.(type) {
	case *corev1.Pod:
		return &v.Spec, nil, nil
	case *appsv1.Deployment:
		return &v.Spec.Template.Spec, v.Spec.Selector, v.Spec.Template.Labels
	case *appsv1.DaemonSet:
		return &v.Spec.Template.Spec, v.Spec.Selector, v.Spec.Template.Labels
	case *appsv1.StatefulSet:
		return &v.Spec.Template.Spec, v.Spec.Selector, v.Spec.Template.Labels
	}
	return nil, nil, nil
}

// checkObjects applies the rules to each object and across objects.
func checkObjects(objects []*object) {
	type key struct{ kind, id string }
	seen := map[key]*object{}
	namespaces := map[string]bool{"default": true, "kube-system": true}
	serviceAccounts := map[string]bool{}
	roles := map[string]bool{}
	clusterRoles := map[string]bool{}
	drivers := map[string]bool{}
	for _, o := range objects {
		if o.meta.Name == "" {
			o.fail("metadata.name is required")
		}
		if o.namespaced && o.meta.Namespace == "" {
			o.fail("metadata.namespace is required (else it lands in whatever namespace kubectl uses)")
		}
		if !o.namespaced && o.meta.Namespace != "" {
			o.fail("%s is cluster-scoped: metadata.namespace %q has no meaning", o.kind, o.meta.Namespace)
		}
		k := key{o.kind, o.id()}
		if prev, dup := seen[k]; dup {
			o.fail("defined twice (also in %s)", prev.file)
		}
		seen[k] = o
		switch v := o.value.(type) {
		case *corev1.Namespace:
			namespaces[v.Name] = true
		case *corev1.ServiceAccount:
			serviceAccounts[v.Namespace+"/"+v.Name] = true
		case *rbacv1.Role:
			roles[v.Namespace+"/"+v.Name] = true
		case *rbacv1.ClusterRole:
			clusterRoles[v.Name] = true
		case *storagev1.CSIDriver:
			drivers[v.Name] = true
		}
	}
	for _, o := range objects {
		if o.namespaced && o.meta.Namespace != "" && !namespaces[o.meta.Namespace] {
			o.fail("namespace %q is defined by no Namespace manifest", o.meta.Namespace)
		}
		switch v := o.value.(type) {
		case *rbacv1.ClusterRole:
			checkRules(o, v.Rules)
		case *rbacv1.Role:
			checkRules(o, v.Rules)
		case *rbacv1.ClusterRoleBinding:
			checkBinding(o, v.RoleRef, v.Subjects, "", roles, clusterRoles, serviceAccounts)
		case *rbacv1.RoleBinding:
			checkBinding(o, v.RoleRef, v.Subjects, v.Namespace, roles, clusterRoles, serviceAccounts)
		case *storagev1.StorageClass:
			if v.Provisioner == "" {
				o.fail("provisioner is required")
			} else if len(drivers) > 0 && !drivers[v.Provisioner] {
				o.fail("provisioner %q is no CSIDriver of these manifests", v.Provisioner)
			}
		case *snapshotv1.VolumeSnapshotClass:
			if v.Driver == "" {
				o.fail("driver is required")
			} else if len(drivers) > 0 && !drivers[v.Driver] {
				o.fail("driver %q is no CSIDriver of these manifests", v.Driver)
			}
			if v.DeletionPolicy == "" {
				o.fail("deletionPolicy is required")
			}
		}
		if spec, selector, labels := podSpec(o); spec != nil {
			if _, isPod := o.value.(*corev1.Pod); !isPod {
				checkSelector(o, selector, labels)
			}
			checkPodSpec(o, spec)
			if sa := spec.ServiceAccountName; sa != "" && !serviceAccounts[o.meta.Namespace+"/"+sa] {
				o.fail("serviceAccountName %q: no ServiceAccount of that name in namespace %q", sa, o.meta.Namespace)
			}
		}
	}
}

func checkRules(o *object, rules []rbacv1.PolicyRule) {
	for i, r := range rules {
		if len(r.Verbs) == 0 {
			o.fail("rules[%d]: no verbs", i)
		}
		if len(r.NonResourceURLs) == 0 && (len(r.APIGroups) == 0 || len(r.Resources) == 0) {
			o.fail("rules[%d]: apiGroups and resources are required", i)
		}
	}
}

func checkBinding(o *object, ref rbacv1.RoleRef, subjects []rbacv1.Subject, ns string,
	roles, clusterRoles, serviceAccounts map[string]bool) {
	if ref.APIGroup != rbacv1.GroupName {
		o.fail("roleRef.apiGroup %q, want %q", ref.APIGroup, rbacv1.GroupName)
	}
	switch ref.Kind {
	case "ClusterRole":
		if !clusterRoles[ref.Name] && !strings.HasPrefix(ref.Name, "system:") {
			o.fail("roleRef: no ClusterRole %q in these manifests", ref.Name)
		}
	case "Role":
		if ns == "" {
			o.fail("roleRef: a ClusterRoleBinding cannot bind a Role")
		} else if !roles[ns+"/"+ref.Name] {
			o.fail("roleRef: no Role %q in namespace %q", ref.Name, ns)
		}
	default:
		o.fail("roleRef.kind %q: want Role or ClusterRole", ref.Kind)
	}
	if len(subjects) == 0 {
		o.fail("no subjects")
	}
	for _, s := range subjects {
		if s.Kind != rbacv1.ServiceAccountKind {
			continue
		}
		if s.Namespace == "" {
			o.fail("subject ServiceAccount %q: namespace is required", s.Name)
		} else if !serviceAccounts[s.Namespace+"/"+s.Name] {
			o.fail("subject: no ServiceAccount %s/%s in these manifests", s.Namespace, s.Name)
		}
	}
}

func checkSelector(o *object, selector *metav1.LabelSelector, labels map[string]string) {
	if selector == nil || (len(selector.MatchLabels) == 0 && len(selector.MatchExpressions) == 0) {
		o.fail("spec.selector is required")
		return
	}
	for k, v := range selector.MatchLabels {
		if labels[k] != v {
			o.fail("spec.selector.matchLabels %s=%s does not match the pod template's labels", k, v)
		}
	}
}

// varRef is a $(NAME) reference Kubernetes expands in command and args ($$ escapes it).
var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// socketFlags name the CSI socket a container serves or calls.
var socketFlags = []string{"--csi-address", "--endpoint"}

// socketPaths returns the socket path each of socketFlags is given in args ("--flag=V" or
// "--flag V"), without a unix:// scheme.
func socketPaths(args []string) map[string]string {
	out := map[string]string{}
	for i, a := range args {
		for _, f := range socketFlags {
			var v string
			switch {
			case strings.HasPrefix(a, f+"="):
				v = strings.TrimPrefix(a, f+"=")
			case a == f && i+1 < len(args):
				v = args[i+1]
			default:
				continue
			}
			v = strings.TrimPrefix(v, "unix://")
			out[f+" "+v] = v
		}
	}
	return out
}

func checkPodSpec(o *object, spec *corev1.PodSpec) {
	if len(spec.Containers) == 0 {
		o.fail("no containers")
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if volumes[v.Name] {
			o.fail("volume %q defined twice", v.Name)
		}
		volumes[v.Name] = true
	}
	type socketAt struct{ volume, rel string }
	var socketUser string
	var socket socketAt
	names := map[string]bool{}
	all := append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		where := fmt.Sprintf("container %q", c.Name)
		if c.Name == "" {
			o.fail("a container has no name")
		}
		if names[c.Name] {
			o.fail("%s defined twice", where)
		}
		names[c.Name] = true
		if c.Image == "" {
			o.fail("%s has no image", where)
		}
		privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
		mountPaths := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				o.fail("%s mounts volume %q, which the pod spec does not define", where, m.Name)
			}
			if mountPaths[m.MountPath] {
				o.fail("%s mounts two volumes at %s", where, m.MountPath)
			}
			mountPaths[m.MountPath] = true
			if !path.IsAbs(m.MountPath) {
				o.fail("%s: mountPath %q is not absolute", where, m.MountPath)
			}
			if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional && !privileged {
				o.fail("%s: Bidirectional mount propagation of %q needs a privileged container", where, m.Name)
			}
		}
		for _, d := range c.VolumeDevices {
			if !volumes[d.Name] {
				o.fail("%s uses volume device %q, which the pod spec does not define", where, d.Name)
			}
		}
		// $(NAME) in command and args must name an env variable of the container; an
		// undefined one is passed on literally.
		env := map[string]bool{}
		for _, e := range c.Env {
			env[e.Name] = true
		}
		for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
			for _, m := range varRef.FindAllStringSubmatch(a, -1) {
				if m[1] != "" && !env[m[1]] {
					o.fail("%s: %q refers to $(%s), which is not in its env", where, a, m[1])
				}
			}
		}
		// Probes' named ports must be ports of the container.
		ports := map[string]bool{}
		for _, p := range c.Ports {
			if p.Name != "" {
				ports[p.Name] = true
			}
		}
		for what, p := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
			if p == nil || p.HTTPGet == nil {
				continue
			}
			if name := p.HTTPGet.Port.StrVal; name != "" && !ports[name] {
				o.fail("%s: %s uses port %q, which the container does not name", where, what, name)
			}
		}
		// A CSI socket's directory must be a volume mounted in the container, and every
		// container of the pod must reach the same socket on the same volume.
		for flagAndPath, p := range socketPaths(append(append([]string(nil), c.Command...), c.Args...)) {
			if strings.Contains(p, "$(") {
				continue
			}
			dir := path.Dir(p)
			// The deepest mount holding the directory is where the socket is.
			var at *socketAt
			deepest := -1
			for _, m := range c.VolumeMounts {
				mp := strings.TrimSuffix(m.MountPath, "/")
				if (dir == mp || strings.HasPrefix(dir, mp+"/")) && len(mp) > deepest {
					deepest = len(mp)
					at = &socketAt{m.Name, path.Join("/", m.SubPath, strings.TrimPrefix(p, mp))}
				}
			}
			if at == nil {
				o.fail("%s: %s: directory %s is not a mounted volume", where, flagAndPath, dir)
				continue
			}
			if socketUser == "" {
				socketUser, socket = c.Name, *at
			} else if *at != socket {
				o.fail("%s: %s is %s on volume %q, but container %q uses %s on volume %q",
					where, flagAndPath, at.rel, at.volume, socketUser, socket.rel, socket.volume)
			}
		}
	}
	// node-driver-registrar tells the kubelet where the socket is on the host: that must
	// be where the socket's hostPath volume puts it.
	for _, c := range all {
		for _, a := range c.Args {
			reg, ok := strings.CutPrefix(a, "--kubelet-registration-path=")
			if !ok {
				continue
			}
			if socketUser == "" {
				o.fail("container %q: %s, but no container names a CSI socket", c.Name, a)
				continue
			}
			for _, v := range spec.Volumes {
				if v.Name != socket.volume {
					continue
				}
				if v.HostPath == nil {
					o.fail("container %q: %s, but the socket's volume %q is no hostPath", c.Name, a, v.Name)
				} else if want := path.Join(v.HostPath.Path, socket.rel); reg != want {
					o.fail("container %q: %s, but the socket is %s on the host (volume %q)", c.Name, a, want, v.Name)
				}
			}
		}
	}
}

// printContainers prints "container {JSON}" for every container of every pod template.
func printContainers(objects []*object) {
	type line struct {
		File    string   `json:"file"`
		Object  string   `json:"object"`
		Name    string   `json:"name"`
		Image   string   `json:"image"`
		Command []string `json:"command"`
		Args    []string `json:"args"`
	}
	for _, o := range objects {
		spec, _, _ := podSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
			b, _ := json.Marshal(line{o.file, o.kind + " " + o.id(), c.Name, c.Image, c.Command, c.Args})
			fmt.Printf("container %s\n", b)
		}
	}
}
