//! The controllers' integration tests, one module per controller, in one test binary (a
//! binary per file linked the apiserver and every controller once per file).

mod bootstrap;
mod controllers;
mod cronjob;
mod csr;
mod daemonset;
mod disruption;
mod endpoints_trigger_time;
mod endpointslicemirroring;
mod ephemeral;
mod job;
mod nodeipam;
mod nodelifecycle;
mod nodettl_legacytokens;
mod persistentvolume;
mod podautoscaler;
mod resourcequota;
mod restart;
mod rootcacertpublisher;
mod serviceaccountcredentials;
mod serviceaccounttoken;
mod servicecidrs;
mod statefulset;
mod storageprotection;
mod support;
mod tainteviction;
mod ttlafterfinished;
mod vapstatus;
