import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// Lock-step turn split: the share of polls that found the engine's turn
// (engine stepping) vs the trainer's turn (trainer computing actions).
ColumnLayout {
    id: root
    property real enginePct: -1
    property real trainerPct: -1
    property bool attached: true  // detached: nothing is known about a trainer either
    readonly property bool known: enginePct >= 0 && trainerPct >= 0

    Layout.fillWidth: true
    spacing: 3

    Item {
        id: bar
        Layout.fillWidth: true
        Layout.preferredHeight: 14

        Rectangle {
            anchors.fill: parent
            radius: 3
            color: Theme.control
        }
        Rectangle {
            visible: root.known
            x: 0
            width: Math.round(bar.width * Math.min(100, Math.max(0, root.enginePct)) / 100)
            height: bar.height
            radius: 3
            color: Theme.engine
        }
        Rectangle {
            visible: root.known
            x: Math.round(bar.width * Math.min(100, Math.max(0, root.enginePct)) / 100)
            width: bar.width - x
            height: bar.height
            radius: 3
            color: Theme.trainer
        }
    }
    RowLayout {
        Layout.fillWidth: true
        Label {
            objectName: "turnSplitText"
            text: root.known ? "engine " + Math.round(root.enginePct) + " %" : (root.attached ? "no lock-step: no trainer attached" : "—")
            color: root.known ? Theme.engine : Theme.dim
            font.pixelSize: Theme.small
        }
        Item { Layout.fillWidth: true }
        Label {
            visible: root.known
            text: "trainer " + (100 - Math.round(root.enginePct)) + " %"
            color: Theme.trainer
            font.pixelSize: Theme.small
        }
    }
}
