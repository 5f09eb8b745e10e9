pragma ComponentBehavior: Bound
import QtQuick
import QtQuick.Controls
import QtQuick.Layouts
import LuckyMonitor.Backend

// The monitor's mirror of the engine editor's RpcPanel: connection state,
// segment picker, header facts, rates, lock-step turn split, service switches
// and simulation mode. Everything is bound to the required property `backend`
// (lucky_monitor.ui.backend.MonitorBackend, given when the view is created);
// switches show what the engine published in the segment, never what was asked.
DarkPane {
    id: root
    objectName: "rpcPanel"
    required property MonitorBackend backend
    implicitWidth: 340
    implicitHeight: 760

    // Counters come as exact decimal text (a u64 does not fit a QML number).
    function count(v) { return root.backend.attached ? v : "—" }
    function rate(v) { return root.backend.attached && v >= 0 ? v.toFixed(1) : "—" }

    ScrollView {
        id: scroll
        anchors.fill: parent
        leftPadding: 14
        rightPadding: 16
        topPadding: 12
        bottomPadding: 12
        contentWidth: availableWidth
        clip: true

        ColumnLayout {
            id: column
            width: scroll.availableWidth
            spacing: 6

            // ---------------------------------------------------------- state
            RowLayout {
                Layout.fillWidth: true
                spacing: 10
                Rectangle {
                    Layout.preferredWidth: 14
                    Layout.preferredHeight: 14
                    Layout.alignment: Qt.AlignVCenter
                    radius: 7
                    color: root.backend.stateColor
                }
                Label {
                    objectName: "stateLine"
                    Layout.fillWidth: true
                    text: root.backend.stateText
                    textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
                    color: root.backend.stateColor
                    font.pixelSize: Theme.big
                    font.bold: true
                    wrapMode: Text.Wrap
                    maximumLineCount: 2
                    elide: Text.ElideRight
                }
            }
            Label {
                objectName: "reasonLine"
                Layout.fillWidth: true
                visible: text !== ""
                text: root.backend.reason
                textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
                color: root.backend.healthy ? Theme.dim : Theme.text
                wrapMode: Text.Wrap
            }
            Label {
                objectName: "noticeLine"
                Layout.fillWidth: true
                visible: text !== ""
                text: root.backend.notice
                textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
                color: Theme.accent
                font.italic: true
                wrapMode: Text.Wrap
            }

            // --------------------------------------------------------- picker
            ComboBox {
                id: picker
                objectName: "segmentPicker"
                Layout.fillWidth: true
                Layout.topMargin: 4
                model: root.backend.segments
                textRole: "label"
                valueRole: "name"
                currentIndex: root.backend.segmentIndex
                onActivated: (index) => {
                    root.backend.selectSegment(valueAt(index))
                    currentIndex = Qt.binding(() => root.backend.segmentIndex)
                }
                HoverHandler { id: pickerHover }
                ToolTip.visible: pickerHover.hovered && picker.displayText !== ""
                ToolTip.text: picker.displayText
                ToolTip.delay: 600
            }

            // ------------------------------------------------------ sim mode
            // Near the top: the one control of the panel used often, visible without scrolling.
            Section {
                title: "Simulation"
                aside: simResult.faded ? "" : root.backend.simModeResult
                asideColor: Theme.resultColor(root.backend.simModeResultKind)
                RowLayout {
                    Layout.fillWidth: true
                    spacing: 8
                    Label {
                        text: "mode"
                        color: Theme.dim
                        Layout.preferredWidth: Theme.keyWidth
                    }
                    ComboBox {
                        id: simCombo
                        objectName: "simMode"
                        Layout.fillWidth: true
                        model: root.backend.simModeNames
                        // Detached: no mode is known, so none is shown (a greyed "realtime" read as a fact).
                        currentIndex: root.backend.attached ? root.backend.simMode : -1
                        enabled: root.backend.toolsAvailable && !root.backend.simModePending
                        onActivated: (index) => {
                            root.backend.setSimMode(index)
                            currentIndex = Qt.binding(() => root.backend.attached ? root.backend.simMode : -1)
                        }
                    }
                }
                // The engine's answer sits on the section's title line (a line of its own pushed the services
                // down for 5 s, under the pointer): a success goes after a few seconds, a failure stays.
                Item {
                    id: simResult
                    objectName: "simModeResult"
                    property bool faded: false
                    readonly property string text: root.backend.simModeResult
                    visible: false
                    onTextChanged: {
                        faded = false
                        if (root.backend.simModeResultKind === "ok")
                            fadeTimer.restart()
                        else
                            fadeTimer.stop()
                    }
                    Timer {
                        id: fadeTimer
                        objectName: "simModeFade"
                        interval: 5000
                        onTriggered: simResult.faded = true
                    }
                }
            }

            // ------------------------------------------------------- services
            // The panel's other controls, right under the mode: at 1280x800 they show without scrolling,
            // the facts follow.
            Section {
                title: "Services"
                Label {
                    objectName: "toolsReason"
                    Layout.fillWidth: true
                    visible: !root.backend.toolsAvailable
                    text: "Commands disabled: " + root.backend.toolsReason
                    textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
                    color: Theme.warn
                    wrapMode: Text.Wrap
                }
                Repeater {
                    model: root.backend.services
                    delegate: RowLayout {
                        id: row
                        objectName: "serviceRow_" + model.name
                        required property var model
                        required property int index
                        // A click puts the tooltip away until the pointer leaves the row, as a widget's does: it
                        // had stayed up over the row above, telling the state before the click.
                        property bool tipDismissed: false
                        readonly property bool tipShown: rowHover.hovered && !tipDismissed
                        readonly property string tip: !root.backend.toolsAvailable ? root.backend.toolsReason
                                                    : !model.available ? "the engine does not offer " + model.name
                                                    : model.pending ? "waiting for the engine"
                                                    : model.enabled ? "click to disable " + model.name
                                                    : "click to enable " + model.name
                        Layout.fillWidth: true
                        spacing: 8

                        Label {
                            text: row.model.name
                            textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
                            color: row.model.available ? Theme.text : Theme.dim
                            Layout.preferredWidth: 92
                            elide: Text.ElideRight
                        }
                        Label {
                            id: serviceResult
                            objectName: "serviceResult_" + row.model.name
                            // A success goes after a few seconds, as the mode's does (it read as the state of
                            // the service long after); a failure or a pending request stays until the next one.
                            property bool faded: false
                            opacity: faded ? 0 : 1  // keeps its room: the switch beside it never moves
                            onTextChanged: {
                                faded = false
                                if (!row.model.pending && row.model.resultKind === "ok")
                                    serviceFade.restart()
                                else
                                    serviceFade.stop()
                            }
                            Timer {
                                id: serviceFade
                                objectName: "serviceFade_" + row.model.name
                                interval: 5000
                                onTriggered: serviceResult.faded = true
                            }
                            Layout.fillWidth: true
                            text: row.model.pending ? "waiting…" : row.model.lastResult
                            textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
                            color: Theme.resultColor(row.model.pending ? "pending" : row.model.resultKind)
                            font.pixelSize: Theme.small
                            elide: Text.ElideRight
                        }
                        Label {
                            text: !row.model.available ? "n/a" : row.model.enabled ? "on" : "off"
                            color: row.model.available && row.model.enabled ? Theme.good : Theme.dim
                            font.bold: row.model.available && row.model.enabled
                            horizontalAlignment: Text.AlignRight
                            Layout.preferredWidth: 28
                        }
                        Switch {
                            objectName: "serviceSwitch_" + row.model.name
                            checkable: false
                            checked: row.model.enabled
                            enabled: root.backend.toolsAvailable && row.model.available && !row.model.pending
                            opacity: enabled ? 1.0 : 0.45
                            onClicked: {
                                row.tipDismissed = true
                                root.backend.setServiceEnabled(row.model.bit, !row.model.enabled)
                            }
                        }
                        HoverHandler {
                            id: rowHover
                            onHoveredChanged: if (!hovered) row.tipDismissed = false
                        }
                        ToolTip.visible: row.tipShown
                        ToolTip.text: row.tip
                        ToolTip.delay: 500
                    }
                }
            }

            // ---------------------------------------------------------- facts
            Section {
                title: "Segment"
                aside: root.backend.liveEvery
                Fact { key: "name"; value: root.backend.segmentName || "—" }
                Fact { key: "session"; value: root.backend.sessionId }
                Fact { key: "size"; value: root.backend.segmentSize }
                Fact {
                    key: "engine"
                    value: root.backend.attached ? root.backend.engineState + " · pid " + root.backend.serverPid : "—"
                }
                Fact { key: "heartbeat"; value: root.backend.heartbeatAge }
            }

            Section {
                title: "Lock-step"
                aside: root.backend.liveEvery
                Fact { key: "header mode"; value: root.backend.mode }
                Fact {
                    key: "envs"
                    value: root.backend.attached
                           ? root.backend.numEnvs + " · obs " + root.backend.obsSize + " · act " + root.backend.actSize
                           : "—"
                }
                Fact {
                    key: "trainer"
                    value: !root.backend.attached ? "—"
                           : root.backend.clientPid === 0 ? "none attached"
                           : "pid " + root.backend.clientPid + (root.backend.trainerAlive ? "" : " (exited)")
                    valueColor: root.backend.clientPid !== 0 && !root.backend.trainerAlive ? Theme.bad : Theme.text
                }
                Fact { key: "frame_seq"; value: root.count(root.backend.frameSeq) }
                Fact { key: "action_seq"; value: root.count(root.backend.actionSeq) }
                TurnSplit {
                    objectName: "turnSplit"
                    Layout.topMargin: 4
                    enginePct: root.backend.engineSharePct
                    trainerPct: root.backend.trainerSharePct
                    attached: root.backend.attached
                }
            }

            Section {
                title: "Rates"
                aside: root.backend.liveEvery
                Fact { key: "frames/s"; value: root.rate(root.backend.framesPerSec) }
                Fact { key: "images/s"; value: root.rate(root.backend.imagesPerSec) }
                Fact {
                    objectName: "framesSkipped"
                    key: "frames skipped"
                    // the whole attach's: the plots' note counts the window they show
                    value: root.backend.attached ? root.backend.framesSkipped + " since attach" : "—"
                }
                Fact {
                    key: "torn reads"
                    value: root.backend.attached
                           ? "images " + root.count(root.backend.tornImages) + " · hot " + root.count(root.backend.tornHot)
                           : "—"
                }
            }

            Section {
                title: "Images"
                aside: root.backend.liveEvery
                Fact { key: "format"; value: root.backend.imageText }
                Fact { key: "image_seq"; value: root.count(root.backend.imageSeq) }
            }

            Section {
                title: "Rings"
                Fact { key: "command"; value: root.backend.cmdRingText }
                Fact { key: "tools"; value: root.backend.toolsText }
                Fact { key: "tools owner"; value: root.backend.toolsOwnerText }
            }

            Section {
                title: "GPU"
                Fact { key: "observations"; value: root.backend.gpuText }
            }
        }
    }
}
