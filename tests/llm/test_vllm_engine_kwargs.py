"""vllm_engine_kwargs: float32 on CPUs without native bfloat16 (no vLLM import needed: on_cpu is given)."""

from dagster_project.llm.backends.vllm import cpu_lacks_bf16, vllm_engine_kwargs

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n"


def test_cpu_flags():
    assert cpu_lacks_bf16(AVX2) and not cpu_lacks_bf16(SAPPHIRE)
    assert not cpu_lacks_bf16("processor\t: 0\n")  # no flags line (e.g. ARM): leave vLLM's choice alone


def test_float32_only_on_a_cpu_without_bf16_and_never_over_a_given_dtype():
    base = {"max_model_len": 2048}
    assert vllm_engine_kwargs(base, on_cpu=True, cpuinfo=AVX2) == {"max_model_len": 2048, "dtype": "float32"}
    assert vllm_engine_kwargs(base, on_cpu=True, cpuinfo=SAPPHIRE) == base
    assert vllm_engine_kwargs(base, on_cpu=False, cpuinfo=AVX2) == base  # GPUs keep vLLM's default
    given = {"dtype": "bfloat16"}
    assert vllm_engine_kwargs(given, on_cpu=True, cpuinfo=AVX2) == given
    assert base == {"max_model_len": 2048}  # the role's own dict is not modified
