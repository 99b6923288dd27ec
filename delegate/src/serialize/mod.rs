//! ExecuTorch-compatible XNNPACK payloads: schema, writer, header, loader, .pte reader. (issue 4)
