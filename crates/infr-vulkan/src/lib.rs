//! infr-vulkan
