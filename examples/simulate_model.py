"""Simulate a trained network on accelerator datapaths, bit for bit, and find the narrowest accumulator.

1. train a small quantization-aware CNN on the digits data set (a few seconds);
2. simulate it on TFLite's int8 arithmetic and on a custom TOML-described NPU;
3. sweep accumulator widths with saturating and wrapping adders;
4. write an HTML report (plots embedded) to ``simulate-model-report/``.

Run: ``python examples/simulate_model.py``.
"""
from __future__ import annotations

import os
import tempfile

from fxpsim.cli import demo_model
from fxpsim.nn.datasets import load_digits
from fxpsim.hardware import HardwareConfig, preset, simulate
from fxpsim.hardware.sweeps import sweep

MY_NPU = """
name = "my-npu"
description = "int8 MAC array, 20-bit saturating accumulator preloaded with the bias, shift requantization"

[weights]
bits = 8
scales = "per-tensor"

[activations]
bits = 8
symmetric = true

[accumulator]
bits = 20
overflow = "saturate"

[requantization]
scheme = "shift"
rounding = "half_even"
"""


def main(out_dir: str = "simulate-model-report") -> None:
    model, _ = demo_model(seed=0)          # the demo's QAT CNN (15 epochs, about a second)
    x, y = load_digits("test")
    calibration = load_digits("train")[0][:500]

    report = simulate(model, "tflite-int8", x, y, calibration_x=calibration)
    print(report.to_text(), "\n")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "my-npu.toml")
        with open(path, "w") as fh:
            fh.write(MY_NPU)
        npu = HardwareConfig.from_toml(path)
    npu_report = simulate(model, npu, x, y, calibration_x=calibration)
    print(f"{npu.name}: {npu.summary()}")
    print(f"  accuracy {npu_report.network['accuracy']:.4f}, agreement with float "
          f"{npu_report.network['agreement']:.4f}, overflows {npu_report.network['overflow_count']}\n")

    result = sweep(model, (x, y), {"accumulator_bits": list(range(12, 33, 2)),
                                   "accumulator_overflow": ["saturate", "wrap"]},
                   config=preset("tflite-int8"), calibration_x=calibration)
    print(result.table(), "\n")
    for rec in result.pareto_accumulator:
        print(f"Pareto: {rec['accumulator_bits']} bits ({rec['accumulator_overflow']}) "
              f"-> accuracy {rec['accuracy']:.4f}")
    report.sweep = result.to_dict()
    paths = report.save(out_dir)
    print(f"\nreport: {paths['html']}")


if __name__ == "__main__":
    main()
