package stream

// CatchUpSQL is catchUpSQL, for the plan test of the external test package.
const CatchUpSQL = catchUpSQL

// CatchUpPlanning is catchUpPlanning, for the same test.
var CatchUpPlanning = catchUpPlanning

// ChooseCatchUp is chooseCatchUp, for the same test.
var ChooseCatchUp = chooseCatchUp
