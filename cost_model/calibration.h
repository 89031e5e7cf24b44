// Calibration: fitting the roofline's efficiency factors to measured op times.
//
// For each op class and pass, the measured time minus the launch overhead is compared with the
// ideal roofline time on the profiled device's measured peaks (sgemm FLOP/s and copy
// bandwidth). Compute-bound passes fit the class's compute efficiency and memory-bound passes
// its memory efficiency: efficiency = sum(ideal) / sum(measured), so long ops weigh more than
// short ones. The overhead is the median time of the forward passes that do almost no work.
// Classes without enough measurements keep the defaults.
#pragma once

#include "cost_model/device.h"
#include "cost_model/profile_db.h"
#include "cost_model/roofline.h"

namespace rannc::cost {

// The preset with the peaks the profile measured.
DeviceSpec with_measured_peaks(const DeviceSpec& preset, const DeviceProfile& profile);

Efficiencies calibrate(const DeviceProfile& profile, const Efficiencies& defaults);

// Efficiencies fitted on one device, carried to another: a CPU's sgemm is near its own measured
// peak, which says nothing about a GPU's. Only ratios transfer: matmul keeps the target's
// default compute efficiency and every class keeps its fitted ratio to matmul; memory
// efficiencies likewise relative to elementwise ops.
Efficiencies transfer_relative(const Efficiencies& fitted, const Efficiencies& target_defaults);

}  // namespace rannc::cost
