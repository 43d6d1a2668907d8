//! What can go wrong on the GPU side, as one-line messages.

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no CUDA driver library could be loaded (tried {0})")]
    NoDriver(String),
    #[error("no NVRTC library could be loaded (tried {0}); set LD_LIBRARY_PATH to CUDA's lib64")]
    NoNvrtc(String),
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error("NVRTC compile failed: {0}")]
    Compile(String),
    #[error("invalid input: {0}")]
    Input(String),
}

impl From<cudarc::driver::DriverError> for GpuError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        GpuError::Driver(format!("{e:?}"))
    }
}
