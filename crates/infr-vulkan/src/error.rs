//! Errors of the Vulkan layer and their mapping to [`BackendError`].

use ash::vk;
use infr_core::BackendError;

/// A failure below the `Backend` trait: loading Vulkan, creating objects, compiling shaders.
#[derive(Debug, thiserror::Error)]
pub enum VkError {
    /// The Vulkan loader (`libvulkan.so.1`) could not be loaded.
    #[error("Vulkan is not available on this machine (could not load the Vulkan loader: {0}); install a Vulkan driver and libvulkan1")]
    NoLoader(String),
    /// No physical device (or not the requested one) was found.
    #[error("no Vulkan device {0}")]
    NoDevice(String),
    /// The device lacks something this backend needs.
    #[error("Vulkan device {device} lacks {what}")]
    MissingCapability {
        /// Device name.
        device: String,
        /// The missing capability.
        what: String,
    },
    /// A Vulkan call failed.
    #[error("{call} failed: {result}")]
    Call {
        /// The Vulkan function.
        call: &'static str,
        /// Its result code.
        result: vk::Result,
    },
    /// An allocation did not fit the device.
    #[error("out of device memory: {what} needs {bytes} bytes")]
    OutOfMemory {
        /// What was being allocated.
        what: String,
        /// Bytes requested.
        bytes: u64,
    },
    /// A WGSL shader failed to parse, validate or translate (a bug in this crate).
    #[error("shader {name}: {message}")]
    Shader {
        /// Kernel name.
        name: String,
        /// naga's diagnostic.
        message: String,
    },
    /// A request that the backend cannot serve.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl VkError {
    /// Wrap a failed Vulkan call, turning memory errors into [`VkError::OutOfMemory`].
    pub(crate) fn call(call: &'static str, result: vk::Result) -> Self {
        VkError::Call { call, result }
    }

    /// Convert into the trait's error type, naming the device.
    pub fn into_backend(self, device: &str) -> BackendError {
        match self {
            VkError::OutOfMemory { what, bytes } => {
                BackendError::OutOfMemory { device: device.to_owned(), what, bytes }
            }
            VkError::Call { call, result }
                if result == vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
                    || result == vk::Result::ERROR_OUT_OF_HOST_MEMORY =>
            {
                BackendError::OutOfMemory { device: device.to_owned(), what: call.to_owned(), bytes: 0 }
            }
            VkError::Unsupported(what) => BackendError::Unsupported { backend: device.to_owned(), what },
            other => BackendError::Device(other.to_string()),
        }
    }
}

/// Shorthand for results of this crate's internals.
pub type VkResult<T> = Result<T, VkError>;

/// Attach a call name to an `ash` result.
pub(crate) trait CallExt<T> {
    /// Name the failed call.
    fn vk(self, call: &'static str) -> VkResult<T>;
}

impl<T> CallExt<T> for Result<T, vk::Result> {
    fn vk(self, call: &'static str) -> VkResult<T> {
        self.map_err(|r| VkError::call(call, r))
    }
}
