import QtQuick
import QtQuick.Controls
import QtQuick.Layouts
import LuckyMonitor.Backend

// Debug-draw form: a line, an arrow or a velocity command sent to the engine
// over the tools channel (DrawReq), once or repeated at a chosen rate, and
// the engine's last answer with its round trip time.
DarkPane {
    id: root
    objectName: "debugDraw"
    implicitWidth: 380
    implicitHeight: formColumn.implicitHeight + 24

    // lucky_monitor.ui.backend.MonitorBackend, given when the view is created
    required property MonitorBackend backend

    readonly property var kinds: ["line", "arrow", "velocity"]
    readonly property string kind: kinds[tabs.currentIndex]
    readonly property bool repeating: root.backend.repeatKind !== ""

    function sendCurrent() {
        const clear = clearBox.checked
        if (tabs.currentIndex === 0)
            root.backend.drawLine(lineStart.vx, lineStart.vy, lineStart.vz, lineEnd.vx, lineEnd.vy, lineEnd.vz,
                             colour.r, colour.g, colour.b, colour.a, clear)
        else if (tabs.currentIndex === 1)
            root.backend.drawArrow(arrowOrigin.vx, arrowOrigin.vy, arrowOrigin.vz,
                              arrowDir.vx, arrowDir.vy, arrowDir.vz,
                              colour.r, colour.g, colour.b, colour.a, arrowScale.value, clear)
        else
            root.backend.drawVelocity(velOrigin.vx, velOrigin.vy, velOrigin.vz,
                                 velX.value, velY.value, velW.value, velScale.value, clear)
    }

    ColumnLayout {
        id: formColumn
        anchors.fill: parent
        anchors.margins: 12
        spacing: 8

        // No heading of its own: the dock's title says "Debug draw" (the two read as a repeat, and the
        // traffic table below has the height at 1280x800).
        Label {
            objectName: "toolsReason"
            Layout.fillWidth: true
            visible: !root.backend.toolsAvailable
            text: "Commands disabled: " + root.backend.toolsReason
            textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
            color: Theme.warn
            wrapMode: Text.Wrap
        }

        ColumnLayout {
            id: form
            objectName: "drawForm"
            Layout.fillWidth: true
            Layout.fillHeight: false  // a tall dock's spare height goes below the form, not into it
            spacing: 8
            enabled: root.backend.toolsAvailable
            opacity: enabled ? 1.0 : 0.45

            TabBar {
                id: tabs
                objectName: "drawTabs"
                Layout.fillWidth: true
                TabButton { text: "Line" }
                TabButton { text: "Arrow" }
                TabButton { text: "Velocity" }
            }

            // The three pages in one area as high as the highest, so that what follows (clear, Send once,
            // Repeat) stays where it is when the tab changes: "Send once" moved 28 px between Line and Arrow.
            ColumnLayout {
                id: pageArea
                objectName: "drawPages"
                Layout.fillWidth: true
                Layout.fillHeight: false  // (a layout fills by default: a tall dock opened 150 px under a short page)
                spacing: 8
                Layout.preferredHeight: Math.max(linePage.implicitHeight + colour.implicitHeight + spacing,
                                                 arrowPage.implicitHeight + colour.implicitHeight + spacing,
                                                 velocityPage.implicitHeight)
                ColumnLayout {
                    id: linePage
                    objectName: "linePage"
                    visible: tabs.currentIndex === 0
                    Layout.fillWidth: true
                    spacing: 4
                    Vec3Field { id: lineStart; objectName: "lineStart"; label: "start"; textX: "0"; textY: "0"; textZ: "0" }
                    Vec3Field { id: lineEnd; objectName: "lineEnd"; label: "end"; textX: "1"; textY: "0"; textZ: "0.5" }
                }
                ColumnLayout {
                    id: arrowPage
                    objectName: "arrowPage"
                    visible: tabs.currentIndex === 1
                    Layout.fillWidth: true
                    spacing: 4
                    Vec3Field { id: arrowOrigin; objectName: "arrowOrigin"; label: "origin"; textX: "0"; textY: "0"; textZ: "0.5" }
                    Vec3Field { id: arrowDir; objectName: "arrowDirection"; label: "direction"; textX: "0"; textY: "0"; textZ: "1" }
                    NumRow { id: arrowScale; objectName: "arrowScale"; label: "scale"; text: "1" }
                }
                ColumnLayout {
                    id: velocityPage
                    objectName: "velocityPage"
                    visible: tabs.currentIndex === 2
                    Layout.fillWidth: true
                    spacing: 4
                    Vec3Field { id: velOrigin; objectName: "velocityOrigin"; label: "origin"; textX: "0"; textY: "0"; textZ: "0" }
                    NumRow { id: velX; objectName: "linVelX"; label: "lin_vel_x"; text: "1" }
                    NumRow { id: velY; objectName: "linVelY"; label: "lin_vel_y"; text: "0" }
                    NumRow { id: velW; objectName: "angVelZ"; label: "ang_vel_z"; text: "0.5" }
                    NumRow { id: velScale; objectName: "velocityScale"; label: "scale"; text: "0.5" }
                }

                ColorPicker {
                    id: colour
                    objectName: "colour"
                    visible: tabs.currentIndex !== 2
                }
                Item { Layout.fillHeight: true }
            }

            CheckBox {
                id: clearBox
                objectName: "clearPrevious"
                text: "clear previous drawings first"
                checked: false
            }

            RowLayout {
                Layout.fillWidth: true
                spacing: 8
                Button {
                    objectName: "sendOnce"
                    text: "Send once"
                    highlighted: true
                    onClicked: root.sendCurrent()
                }
                Item { Layout.fillWidth: true }
                Label {
                    text: "Hz"
                    color: Theme.dim
                }
                SpinBox {
                    id: hz
                    objectName: "repeatHz"
                    from: 1
                    to: 60
                    value: 10
                    editable: true
                    Layout.preferredWidth: 96
                    onValueModified: if (root.repeating) root.backend.setRepeat(root.backend.repeatKind, value)
                }
                Button {
                    objectName: "repeat"
                    text: root.repeating ? "Stop" : "Repeat"
                    onClicked: {
                        if (root.repeating) {
                            root.backend.setRepeat("", 0)
                        } else {
                            root.sendCurrent()
                            root.backend.setRepeat(root.kind, hz.value)
                        }
                    }
                }
            }
            Button {
                objectName: "clearAll"
                Layout.fillWidth: true
                text: "Clear all drawings"
                onClicked: root.backend.clearDrawings()
            }
        }

        Rectangle {
            Layout.fillWidth: true
            Layout.preferredHeight: 1
            color: Theme.line
        }
        RowLayout {
            Layout.fillWidth: true
            spacing: 8
            Label {
                text: "last response"
                color: Theme.dim
            }
            Label {
                objectName: "lastDrawResult"
                Layout.fillWidth: true
                Layout.preferredWidth: 1  // never widen the panel: long results wrap, past two lines elide
                text: root.backend.lastDrawResult || "none yet"
                textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
                color: Theme.resultColor(root.backend.lastDrawResultKind)
                font.bold: true
                // "error: service Debug is disabled · before Debug was turned on" read "… disabled ·…"
                wrapMode: Text.Wrap
                maximumLineCount: 2
                elide: Text.ElideRight
            }
        }
        Label {
            objectName: "drawStats"
            Layout.fillWidth: true
            Layout.preferredWidth: 1  // never widen the panel: the text wraps instead
            wrapMode: Text.WordWrap
            text: (root.backend.lastRttMs >= 0 ? "RTT " + root.backend.lastRttMs.toFixed(2) + " ms · " : "")
                  + root.backend.drawCount + (root.backend.drawCount === 1 ? " reply" : " replies")
                  + (root.repeating ? " · repeating " + root.backend.repeatKind + " at " + root.backend.repeatHz + " Hz" : "")
            color: Theme.dim
            font.pixelSize: Theme.small
            elide: Text.ElideRight

            // The two latencies a user sees side by side, told apart.
            HoverHandler { id: statsHover }
            ToolTip.visible: statsHover.hovered && root.backend.lastRttMs >= 0
            ToolTip.delay: 400
            ToolTip.text: "RTT: from this monitor's send to the poll that saw the reply, so it includes up to a "
                          + "poll period (16.7 ms at 60 Hz) of waiting. The traffic table's ms is the engine's "
                          + "part alone: the reply's sent_ns minus the request's."
        }
        Item { Layout.fillHeight: true }
    }
}
