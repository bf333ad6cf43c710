use super::*;

/// `nvidia-smi --query-gpu=index,name,memory.total,compute_cap
/// --format=csv,noheader,nounits` on a machine with two A100s.
const SMI_A100: &str =
    "0, NVIDIA A100-SXM4-40GB, 40960, 8.0\n1, NVIDIA A100-SXM4-40GB, 40960, 8.0\n";

/// The same query without `nounits`, on a T4 and a V100 (a mixed machine).
const SMI_MIXED_UNITS: &str =
    "0, Tesla T4, 15360 MiB, 7.5\n1, Tesla V100-PCIE-16GB, 16384 MiB, 7.0\n";

/// What a driver older than 510 answers when asked for `compute_cap`.
const SMI_OLD_DRIVER: &str = "Field \"compute_cap\" is not a valid field to query.\n";

/// `nvidia-smi` installed but the driver not loaded.
const SMI_NO_DRIVER: &str = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n";

/// `/proc/driver/nvidia/gpus/0000:00:1e.0/information` of a T4.
const PROC_T4: &str = "Model: \t\t Tesla T4\nIRQ:   \t\t 35\nGPU UUID: \t GPU-4d2a5d0b-6f27-0c4b-1e5a-0f2b6f8b9a31\nVideo BIOS: \t 90.04.38.00.03\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t 0000:00:1e.0\nDevice Minor: \t 1\nGPU Firmware: \t 535.104.05\nGPU Excluded:\t No\n";

/// Another entry, device minor 0.
const PROC_A10: &str = "Model: \t\t NVIDIA A10G\nIRQ:   \t\t 36\nGPU UUID: \t GPU-9e1b3c55-1d0e-7f5a-2c1b-3a4d5e6f7a8b\nBus Type: \t PCIe\nBus Location: \t 0000:00:1f.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n";

fn attr(gpus: &Gpus, name: &str) -> Option<Value> {
    gpus.attributes()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

#[test]
fn nvidia_smi_csv_gives_each_gpus_name_memory_and_capability() {
    let gpus = parse_nvidia_smi(SMI_A100, &SMI_FIELDS);
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0].name.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
    assert_eq!(gpus[0].memory_mib, Some(40960));
    assert_eq!(gpus[1].capability, Some(8.0));
    let mixed = parse_nvidia_smi(SMI_MIXED_UNITS, &SMI_FIELDS);
    assert_eq!(mixed[1].memory_mib, Some(16384), "MiB unit dropped");
    assert_eq!(mixed[0].capability, Some(7.5));
}

#[test]
fn nvidia_smi_messages_and_missing_values_give_no_gpu_or_no_value() {
    assert!(parse_nvidia_smi(SMI_OLD_DRIVER, &SMI_FIELDS).is_empty());
    assert!(parse_nvidia_smi(SMI_NO_DRIVER, &SMI_FIELDS).is_empty());
    assert!(parse_nvidia_smi("", &SMI_FIELDS).is_empty());
    let old = parse_nvidia_smi("0, Tesla K80, 11441\n", &SMI_FIELDS_OLD);
    assert_eq!(old[0].memory_mib, Some(11441));
    assert_eq!(old[0].capability, None);
    let na = parse_nvidia_smi("0, GRID T4-1Q, [N/A], [Not Supported]\n", &SMI_FIELDS);
    assert_eq!(na[0].name.as_deref(), Some("GRID T4-1Q"));
    assert_eq!((na[0].memory_mib, na[0].capability), (None, None));
}

#[test]
fn a_name_with_commas_stays_whole() {
    let gpus = parse_nvidia_smi("0, Odd, Name, 8192, 8.6\n", &SMI_FIELDS);
    assert_eq!(gpus[0].name.as_deref(), Some("Odd, Name"));
    assert_eq!(gpus[0].memory_mib, Some(8192));
    assert_eq!(gpus[0].capability, Some(8.6));
}

#[test]
fn proc_entries_give_names_in_device_order_when_nvidia_smi_says_nothing() {
    let entries = [PROC_T4.to_string(), PROC_A10.to_string()];
    let gpus = detected(Some((SMI_NO_DRIVER, &SMI_FIELDS)), &entries);
    let names: Vec<_> = gpus.iter().map(|g| g.name.as_deref().unwrap()).collect();
    assert_eq!(names, ["NVIDIA A10G", "Tesla T4"]);
    assert_eq!(gpus[0].memory_mib, None);
    assert!(parse_proc_information("garbage\n").is_none());
    // nvidia-smi, when it answers, wins: it knows more.
    let gpus = detected(Some((SMI_A100, &SMI_FIELDS)), &entries);
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0].capability, Some(8.0));
    assert!(detected(None, &[]).is_empty());
}

#[test]
fn no_gpus_advertise_zero_and_nothing_else() {
    let none = Gpus::new(Vec::new(), None);
    assert_eq!(none.attributes(), vec![("GPUs", Value::Int(0))]);
    // The owner keeps the GPUs found: none are advertised, nor their properties.
    let kept = Gpus::new(parse_nvidia_smi(SMI_A100, &SMI_FIELDS), Some(0));
    assert_eq!(kept.attributes(), vec![("GPUs", Value::Int(0))]);
}

#[test]
fn detected_gpus_advertise_count_and_what_every_one_has() {
    let mut gpus = Gpus::new(parse_nvidia_smi(SMI_MIXED_UNITS, &SMI_FIELDS), None);
    assert_eq!(attr(&gpus, "GPUs"), Some(Value::Int(2)));
    assert_eq!(attr(&gpus, "TotalGPUs"), Some(Value::Int(2)));
    assert_eq!(
        attr(&gpus, "DetectedGPUs"),
        Some(Value::str("CUDA0, CUDA1"))
    );
    // The least of the two: what any GPU the job gets has.
    assert_eq!(attr(&gpus, "GPUs_Capability"), Some(Value::Real(7.0)));
    assert_eq!(attr(&gpus, "CUDACapability"), Some(Value::Real(7.0)));
    assert_eq!(attr(&gpus, "GPUs_GlobalMemoryMb"), Some(Value::Int(15360)));
    // Two names: none promised.
    assert_eq!(attr(&gpus, "GPUs_DeviceName"), None);
    gpus.share(2);
    assert_eq!(attr(&gpus, "GPUs"), Some(Value::Int(1)));
    gpus.share(4);
    assert_eq!(attr(&gpus, "GPUs"), Some(Value::Int(0)));
    assert_eq!(attr(&gpus, "TotalGPUs"), Some(Value::Int(2)));
    let same = Gpus::new(parse_nvidia_smi(SMI_A100, &SMI_FIELDS), None);
    let name = Value::str("NVIDIA A100-SXM4-40GB");
    assert_eq!(attr(&same, "CUDADeviceName"), Some(name));
}

#[test]
fn configured_gpus_without_devices_advertise_only_their_number() {
    let gpus = Gpus::new(Vec::new(), Some(2));
    assert_eq!(
        gpus.attributes(),
        vec![("GPUs", Value::Int(2)), ("TotalGPUs", Value::Int(2))]
    );
    // Capability unknown for one device: none is promised for all.
    let mut devices = parse_nvidia_smi(SMI_A100, &SMI_FIELDS);
    devices[1].capability = None;
    let partial = Gpus::new(devices, None);
    assert_eq!(attr(&partial, "GPUs_Capability"), None);
    assert_eq!(
        attr(&partial, "GPUs_GlobalMemoryMb"),
        Some(Value::Int(40960))
    );
}

#[test]
fn each_slot_sees_its_own_gpus() {
    let mut gpus = Gpus::new(Vec::new(), Some(4));
    gpus.share(2);
    assert_eq!(gpus.visible_devices(0).as_deref(), Some("0,1"));
    assert_eq!(gpus.visible_devices(1).as_deref(), Some("2,3"));
    assert_eq!(gpus.visible_devices(2), None, "no third slot's share");
    gpus.share(3);
    assert_eq!(gpus.visible_devices(2).as_deref(), Some("2"));
    gpus.share(5);
    assert_eq!(
        gpus.visible_devices(0),
        None,
        "a slot with no GPU of its own"
    );
    assert_eq!(Gpus::default().visible_devices(0), None);
}
