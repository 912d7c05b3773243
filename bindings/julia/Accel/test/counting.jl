# A test set that counts: every @testset below the top one is one too, so that the run can end
# with the plain "N passed, N failed" line CI reads. Failures and errors are printed when they
# happen, with their place, as Julia's own test set does.
using Test

mutable struct CountingTestSet <: Test.AbstractTestSet
    description::String
    passed::Int
    failed::Int
end
CountingTestSet(description; kwargs...) = CountingTestSet(description, 0, 0)

Test.record(ts::CountingTestSet, ::Test.Pass) = (ts.passed += 1; nothing)
function Test.record(ts::CountingTestSet, result::Union{Test.Fail,Test.Error})
    ts.failed += 1
    println("in \"", ts.description, "\": ", result)
    nothing
end
Test.record(ts::CountingTestSet, ::Test.Broken) = nothing
function Test.record(ts::CountingTestSet, child::CountingTestSet)
    ts.passed += child.passed
    ts.failed += child.failed
    nothing
end

function Test.finish(ts::CountingTestSet)
    if Test.get_testset_depth() > 0
        Test.record(Test.get_testset(), ts)
    else
        println("$(ts.passed) passed, $(ts.failed) failed")
    end
    ts
end
