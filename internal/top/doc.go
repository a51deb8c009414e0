// Package top is "kin top": the lineage tree in the terminal, kept live from
// the event stream, with keys to stop, suspend and resume the selected agent.
//
// Everything goes through kin.Service, as in every other command: the model
// loads the agents (Agents), follows the event stream from the last event
// it has seen (FollowEvents) and, on each burst of events, loads them again
// (at most ten times a second). It renders only the rows on screen, so a
// tree of thousands of agents scrolls as fast as one of seven.
//
// The files: forest.go turns the agent list into the tree and its rows;
// model.go holds the state and Update; keys.go maps keys to moves, folds,
// search and actions; actions.go asks for confirmation and calls the
// service; feed.go follows the event stream; view.go and style.go draw the
// screen; run.go starts the program on a terminal.
package top
