//! The Simplyblock-style sweep over OSD counts. It needs clusters of several sizes on
//! several hosts, which do not exist yet, so the section states that and measures nothing.

use super::{Ctx, Section};
use crate::results::{SectionReport, SectionStatus};

/// Placeholder for the scaling sweep (issue 3).
pub struct ScalingSection;

impl Section for ScalingSection {
    fn id(&self) -> &'static str {
        "scaling"
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        Vec::new()
    }

    fn run(&self, _ctx: &mut Ctx) -> SectionReport {
        SectionReport {
            id: self.id().into(),
            title: "Scaling over OSD counts (Simplyblock)".into(),
            intro: "4k random read and 128k sequential 70/30 throughput as the cluster grows \
                    from 1 to N OSD hosts, with 20 jobs at QD128 in the Simplyblock report."
                .into(),
            baseline_name: "Linear scaling".into(),
            status: SectionStatus::NotMeasured {
                reason: "not measured: needs a multi-OSD-count cluster (issue 3)".into(),
            },
            notes: Vec::new(),
            rows: Vec::new(),
        }
    }
}
