//! `csi_proxy_build_info`: which build of the daemon is running, as the usual Prometheus
//! build-info gauge (always 1, the facts in its labels), so a dashboard can tell versions apart
//! across a fleet.

use prometheus::{IntGaugeVec, Opts};

use crate::{Metrics, MetricsError};

/// Name of the build-info gauge.
pub const BUILD_INFO: &str = "csi_proxy_build_info";

impl Metrics {
    /// Adds `csi_proxy_build_info{commit="…",dirty="true|false",version="…"} 1` (label names
    /// sorted, as for every series of this crate). `commit` is the git commit the daemon was
    /// built from (`unknown` when it was not built from a checkout), `dirty` whether the work tree
    /// had uncommitted changes. Call it once: a second call fails with [`MetricsError::Register`].
    pub fn set_build_info(&self, version: &str, commit: &str, dirty: bool) -> Result<(), MetricsError> {
        let gauge = IntGaugeVec::new(
            Opts::new(
                BUILD_INFO,
                "A metric with a constant '1' value labeled by the version and git commit csi-proxy was built from.",
            ),
            &["version", "commit", "dirty"],
        )?;
        gauge.with_label_values(&[version, commit, if dirty { "true" } else { "false" }]).set(1);
        self.inner.registry.register(Box::new(gauge))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_line() {
        let m = Metrics::new().unwrap();
        assert!(!m.render().contains(BUILD_INFO), "absent until set");
        m.set_build_info("0.1.0", "abcdef123456", true).unwrap();
        let text = m.render();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(BUILD_INFO)).collect();
        assert_eq!(
            lines,
            [
                "# HELP csi_proxy_build_info A metric with a constant '1' value labeled by the version and git commit \
                 csi-proxy was built from.",
                "# TYPE csi_proxy_build_info gauge",
                r#"csi_proxy_build_info{commit="abcdef123456",dirty="true",version="0.1.0"} 1"#,
            ],
            "{text}"
        );
        assert!(matches!(m.set_build_info("0.1.0", "abcdef123456", true), Err(MetricsError::Register(_))));

        let clean = Metrics::new().unwrap();
        clean.set_build_info("0.1.0", "unknown", false).unwrap();
        assert!(clean.render().contains(r#"csi_proxy_build_info{commit="unknown",dirty="false",version="0.1.0"} 1"#));
    }
}
