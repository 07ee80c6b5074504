//! Conversions between kinds served in two API groups from one stored form.
//!
//! Upstream stores core `v1` Events and `events.k8s.io/v1` Events as one resource
//! (`/registry/events`); each API shows it in its own shape. These are the field
//! mappings of upstream's `pkg/apis/events/v1` conversion: `note`<->`message`,
//! `regarding`<->`involvedObject`, `reportingController`<->`reportingComponent`,
//! `deprecatedSource`<->`source`, `deprecatedCount`<->`count`,
//! `deprecatedFirstTimestamp`/`deprecatedLastTimestamp`<->`firstTimestamp`/
//! `lastTimestamp`; `eventTime`, `series`, `type`, `reason`, `action`, `related`,
//! `reportingInstance` and metadata carry over as they are.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;

/// `autoscaling/v1` HorizontalPodAutoscalers to and from the stored `autoscaling/v2` form.
pub mod autoscaling;

/// An `events.k8s.io/v1` Event in its core `v1` (stored) form.
pub fn event_to_core(ev: events::Event) -> core::Event {
    core::Event {
        metadata: ev.metadata,
        involved_object: ev.regarding.unwrap_or_default(),
        related: ev.related,
        action: ev.action,
        reason: ev.reason,
        message: ev.note,
        type_: ev.type_,
        event_time: ev.event_time,
        series: ev.series.map(|s| core::EventSeries {
            count: Some(s.count),
            last_observed_time: Some(s.last_observed_time),
        }),
        reporting_component: ev.reporting_controller,
        reporting_instance: ev.reporting_instance,
        source: ev.deprecated_source,
        count: ev.deprecated_count,
        first_timestamp: ev.deprecated_first_timestamp,
        last_timestamp: ev.deprecated_last_timestamp,
    }
}

/// A core `v1` Event as `events.k8s.io/v1` shows it.
pub fn event_from_core(ev: core::Event) -> events::Event {
    let empty_ref = ev.involved_object == core::ObjectReference::default();
    events::Event {
        metadata: ev.metadata,
        regarding: (!empty_ref).then_some(ev.involved_object),
        related: ev.related,
        action: ev.action,
        reason: ev.reason,
        note: ev.message,
        type_: ev.type_,
        event_time: ev.event_time,
        // A series without its time cannot be shown (the field is required there).
        series: ev.series.and_then(|s| {
            Some(events::EventSeries {
                count: s.count.unwrap_or_default(),
                last_observed_time: s.last_observed_time?,
            })
        }),
        reporting_controller: ev.reporting_component,
        reporting_instance: ev.reporting_instance,
        deprecated_source: ev.source,
        deprecated_count: ev.count,
        deprecated_first_timestamp: ev.first_timestamp,
        deprecated_last_timestamp: ev.last_timestamp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn full_event() -> events::Event {
        events::Event {
            metadata: ObjectMeta {
                name: Some("web.1".into()),
                namespace: Some("prod".into()),
                ..Default::default()
            },
            regarding: Some(core::ObjectReference {
                kind: Some("Pod".into()),
                name: Some("web".into()),
                ..Default::default()
            }),
            related: Some(core::ObjectReference {
                kind: Some("Node".into()),
                name: Some("n1".into()),
                ..Default::default()
            }),
            action: Some("Binding".into()),
            reason: Some("Scheduled".into()),
            note: Some("assigned".into()),
            type_: Some("Normal".into()),
            event_time: Some(MicroTime(at(100))),
            series: Some(events::EventSeries {
                count: 3,
                last_observed_time: MicroTime(at(160)),
            }),
            reporting_controller: Some("default-scheduler".into()),
            reporting_instance: Some("sched-1".into()),
            deprecated_source: Some(core::EventSource {
                component: Some("default-scheduler".into()),
                host: Some("h".into()),
            }),
            deprecated_count: Some(3),
            deprecated_first_timestamp: Some(Time(at(100))),
            deprecated_last_timestamp: Some(Time(at(160))),
        }
    }

    #[test]
    fn events_v1_maps_onto_core_fields() {
        let ev = full_event();
        let core = event_to_core(ev.clone());
        assert_eq!(core.message.as_deref(), Some("assigned"));
        assert_eq!(Some(&core.involved_object), ev.regarding.as_ref());
        assert_eq!(core.related, ev.related);
        assert_eq!(
            core.reporting_component.as_deref(),
            Some("default-scheduler")
        );
        assert_eq!(core.reporting_instance.as_deref(), Some("sched-1"));
        assert_eq!(core.source, ev.deprecated_source);
        assert_eq!(core.count, Some(3));
        assert_eq!(core.first_timestamp, Some(Time(at(100))));
        assert_eq!(core.last_timestamp, Some(Time(at(160))));
        assert_eq!(core.event_time, Some(MicroTime(at(100))));
        let series = core.series.clone().unwrap();
        assert_eq!(series.count, Some(3));
        assert_eq!(series.last_observed_time, Some(MicroTime(at(160))));
        assert_eq!(
            (
                core.type_.as_deref(),
                core.reason.as_deref(),
                core.action.as_deref()
            ),
            (Some("Normal"), Some("Scheduled"), Some("Binding"))
        );
        assert_eq!(event_from_core(core), ev, "the round trip is lossless");
    }

    #[test]
    fn a_legacy_core_event_shows_its_deprecated_fields() {
        let core = core::Event {
            involved_object: core::ObjectReference {
                name: Some("p".into()),
                ..Default::default()
            },
            message: Some("Pulling image".into()),
            source: Some(core::EventSource {
                component: Some("kubelet".into()),
                host: Some("node-a".into()),
            }),
            count: Some(2),
            first_timestamp: Some(Time(at(1))),
            last_timestamp: Some(Time(at(2))),
            ..Default::default()
        };
        let ev = event_from_core(core.clone());
        assert_eq!(ev.note.as_deref(), Some("Pulling image"));
        assert_eq!(
            ev.regarding.as_ref().and_then(|r| r.name.as_deref()),
            Some("p")
        );
        assert_eq!(ev.deprecated_source, core.source);
        assert_eq!(ev.deprecated_count, Some(2));
        assert_eq!(ev.deprecated_last_timestamp, Some(Time(at(2))));
        assert!(ev.event_time.is_none() && ev.series.is_none());
        assert_eq!(event_to_core(ev), core);
    }
}
