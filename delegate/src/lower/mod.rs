//! Lowering: partitioner (three modes), channels-last layout pass, segments, summary. (issue 3)
