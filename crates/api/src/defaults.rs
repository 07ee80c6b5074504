//! Upstream's defaulting (`SetDefaults_*` in k8s.io/kubernetes/pkg/apis/*/v1/defaults.go)
//! for built-in kinds, applied on create and update before validation.
